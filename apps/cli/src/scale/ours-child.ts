/**
 * The scale bench's measuring process for our runtime, forked by run.ts with --expose-gc: N
 * sessions on `Turnwarden` (its public API only), each one turn of the workload at once, through
 * the scripted model or the OpenAI-compatible provider against the loopback server (a process
 * of its own). A SQLite file store in a temp dir, a pool warmed with N workers before the clock
 * starts, watchdog `timeoutMs` / `pollMs` as configured, one listener per workstream counting
 * tokens as a host would. Reports one `RunReport` over IPC and exits.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { constants, type PerformanceEntry, PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { type TurnHandle, Turnwarden, type TurnwardenOptions } from '@turnwarden/supervisor';
import { epochNow, reportToParent } from '../bench/child.js';
import { PRINCIPAL, silentLogger, TENANT } from '../bench/common.js';
import { SCRIPTED } from '../scripted.js';
import {
  bounded,
  errorMessage,
  quiet,
  RssSampler,
  SessionTrack,
  settledRss,
  sleep,
  Window,
} from './measure.js';
import type { GcSummary, OursConfig, RunReport } from './types.js';
import { turnScript } from './workload.js';

const MODEL = 'scale-llm';
/** Polls later than this are located in the window (the bound on the p99). */
const LATE_MS = 50;

function modelOptions(cfg: OursConfig): Pick<TurnwardenOptions, 'model' | 'pluginModules'> {
  if (cfg.provider === 'scripted') return SCRIPTED;
  if (cfg.url === undefined) throw new Error('the http provider needs the loopback server url');
  // Session workers read the models from the environment as they load the from-env plugin.
  process.env.TURNWARDEN_MODELS = JSON.stringify([
    { name: MODEL, provider: 'openai-compatible', baseURL: cfg.url, model: 'loopback', maxRetries: 0 },
  ]);
  return {
    model: MODEL,
    // The heartbeat tool comes from the scripted plugin, as in the demo.
    pluginModules: [
      fileURLToPath(import.meta.resolve('@turnwarden/providers/from-env')),
      ...SCRIPTED.pluginModules,
    ],
  };
}

/** The main thread's collections, as `gc` performance entries (start and duration, ms). */
class GcPauses {
  private readonly pauses: { start: number; ms: number; kind: string }[] = [];
  private readonly observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries() as (PerformanceEntry & { detail?: { kind?: number } })[]) {
      this.pauses.push({ start: e.startTime, ms: e.duration, kind: gcKind(e.detail?.kind) });
    }
  });

  constructor() {
    this.observer.observe({ entryTypes: ['gc'] });
  }

  stop(): void {
    this.observer.disconnect();
  }

  summary(from: number, to: number): GcSummary {
    const ms = this.pauses.filter((p) => p.start >= from && p.start < to).map((p) => p.ms);
    return {
      count: ms.length,
      totalMs: ms.reduce((a, b) => a + b, 0),
      maxMs: ms.length === 0 ? 0 : Math.max(...ms),
    };
  }

  long(from: number, to: number, atLeastMs: number): { atMs: number; ms: number; kind: string }[] {
    return this.pauses
      .filter((p) => p.start >= from && p.start < to && p.ms >= atLeastMs)
      .map((p) => ({ atMs: p.start - from, ms: p.ms, kind: p.kind }));
  }
}

/** The inspector's CPU profiler on this thread, from now until `stop` writes the profile to `file`. */
async function startProfile(file: string | undefined): Promise<{ stop(): Promise<void> } | undefined> {
  if (file === undefined || file === '') return undefined;
  const session = new Session();
  session.connect();
  const post = (method: string, params?: object) =>
    new Promise<unknown>((resolve, reject) =>
      session.post(method, params ?? {}, (err, result) => (err ? reject(err) : resolve(result))),
    );
  await post('Profiler.enable');
  await post('Profiler.setSamplingInterval', { interval: 500 });
  await post('Profiler.start');
  return {
    async stop() {
      const { profile } = (await post('Profiler.stop')) as { profile: unknown };
      writeFileSync(file, JSON.stringify(profile));
      session.disconnect();
    },
  };
}

/** perf_hooks' `NODE_PERFORMANCE_GC_*` flags as words. */
function gcKind(kind: number | undefined): string {
  switch (kind) {
    case constants.NODE_PERFORMANCE_GC_MINOR:
      return 'minor';
    case constants.NODE_PERFORMANCE_GC_MAJOR:
      return 'major';
    case constants.NODE_PERFORMANCE_GC_INCREMENTAL:
      return 'incremental';
    case constants.NODE_PERFORMANCE_GC_WEAKCB:
      return 'weak callbacks';
    default:
      return 'other';
  }
}

async function measure(cfg: OursConfig): Promise<RunReport> {
  const dir = mkdtempSync(join(tmpdir(), 'tw-scale-'));
  const errors: string[] = [];
  const caller = { tenantId: TENANT, principal: PRINCIPAL };
  try {
    const rssBefore = await settledRss();
    const gcPauses = new GcPauses();
    const started = performance.now();
    const tw = await Turnwarden.start({
      ...modelOptions(cfg),
      store: { path: join(dir, 'scale.db') },
      logger: silentLogger(),
      watchdog: { timeoutMs: cfg.timeoutMs, pollMs: cfg.pollMs },
      pool: { maxWorkers: cfg.n, warmWorkers: cfg.n },
      admission: {
        maxActivePerTenant: cfg.n,
        maxWaiting: Math.max(1_024, cfg.n),
        maxWaitingPerTenant: cfg.n,
      },
    });
    // The watchdog's timer starts as start() ends (start waits for the warm pool): its lateness
    // figure covers from here, and so does the other process's timer that it is compared with.
    const lifeStart = epochNow();
    const sampler = new RssSampler(250);
    try {
      // The clock starts once the pool shows N warm workers (or the bound passed: reported).
      const warmDeadline = started + cfg.warmBoundMs;
      while (tw.stats().pool.warm < cfg.n && performance.now() < warmDeadline) await sleep(50);
      const warmMs = performance.now() - started;
      const warmAtStart = tw.stats().pool.warm;
      // …and once the freshly warmed workers' background collections are over (bounded, reported).
      const rest = await quiet();

      const ids: string[] = [];
      for (let i = 0; i < cfg.n; i++) {
        ids.push((await tw.createWorkstream({ ...caller, workstreamId: `scale-${i}` })).workstreamId);
      }
      let window: Window | undefined;
      const t0 = () => window?.t0 ?? performance.now();
      const sessions = ids.map(() => new SessionTrack(t0));
      const offs = await Promise.all(
        ids.map((workstreamId, i) =>
          tw.subscribe({
            ...caller,
            workstreamId,
            listener: (e) => {
              const s = sessions[i];
              if (s === undefined) return;
              if (e.type === 'token') s.token(String(e.data.text ?? ''));
              else if (e.type === 'turn_started') s.mark('started');
              else if (e.type === 'tool_started') s.mark('toolStarted');
              else if (e.type === 'tool_finished') s.mark('toolFinished');
              else if (e.type === 'watchdog_fired') s.fired = true;
            },
          }),
        ),
      );
      const content = turnScript(cfg.workload);
      const before = tw.stats();
      await sleep(100); // the subscriptions' and the creations' writes settle
      const beforeWindow = tw.stats();

      // TURNWARDEN_SCALE_PROFILE=<file.cpuprofile>: the main thread's CPU profile over the window
      // (the inspector's sampling profiler; open it in Chrome's DevTools), to find what holds
      // the watchdog's polls.
      const profile = await startProfile(process.env.TURNWARDEN_SCALE_PROFILE);
      // The clock: every send at once.
      window = new Window();
      // When in the window the watchdog's polls ran late: its stats' max, read every 250 ms,
      // grows when a later poll than any before has run (public stats have no time series).
      const lateJumps: { atMs: number; maxMs: number }[] = [];
      let maxSeen = beforeWindow.watchdog.pollLateness.max;
      const w0 = window.t0;
      let saturation: { atMs: number; waitShare: number; runShare: number } | undefined;
      const lateWatch = setInterval(() => {
        const { pollLateness, saturation: sat } = tw.stats().watchdog;
        if (sat !== undefined && (saturation === undefined || sat.waitShare > saturation.waitShare)) {
          saturation = { atMs: performance.now() - w0, waitShare: sat.waitShare, runShare: sat.runShare };
        }
        const m = pollLateness.max;
        if (m > maxSeen) {
          maxSeen = m;
          if (m > LATE_MS) lateJumps.push({ atMs: performance.now() - w0, maxMs: m });
        }
      }, 250);
      const handles = await Promise.all(
        ids.map((workstreamId, i) =>
          tw.send({ ...caller, workstreamId, content }).then(
            (h): TurnHandle | undefined => h,
            (e: unknown) => {
              sessions[i]?.settle('refused');
              errors.push(`send: ${errorMessage(e)}`);
              return undefined;
            },
          ),
        ),
      );
      const settled = handles.map((h, i) =>
        h === undefined
          ? Promise.resolve()
          : h.done.then((r) => {
              sessions[i]?.settle(r.status);
              if (r.status !== 'completed' && r.error) errors.push(`turn ${r.status}: ${r.error.message}`);
            }),
      );
      const deadline = window.t0 + cfg.boundMs;
      await bounded(Promise.all(settled), deadline - performance.now());
      window.end();
      const windowEnd = performance.now();
      await profile?.stop();
      gcPauses.stop();
      clearInterval(lateWatch);
      const after = tw.stats();
      sampler.stop();

      // Turns past the bound are counted unfinished, then cancelled (bounded too).
      const late = handles.filter((h, i) => h !== undefined && sessions[i]?.status === 'unfinished');
      if (late.length > 0) await bounded(Promise.allSettled(late.map((h) => h?.cancel())), 20_000);
      for (const off of offs) off();

      const common = window.report(lifeStart, cfg.n, sessions, rssBefore, sampler, errors);
      const wd = after.watchdog;
      return {
        ...common,
        watchdogFired: sessions.filter((s) => s.fired).length,
        runtime: {
          warmMs,
          warmAtStart,
          rest,
          pollLateness: wd.pollLateness,
          pollLatenessMaxBeforeWindow: beforeWindow.watchdog.pollLateness.max,
          polls: wd.polls,
          pollsInWindow: wd.polls - beforeWindow.watchdog.polls,
          watchdogFired: wd.fired - before.watchdog.fired,
          spawnedInWindow: after.pool.spawned - beforeWindow.pool.spawned,
          retiredInWindow: after.pool.retired - beforeWindow.pool.retired,
          lateJumps,
          saturation,
          gc: {
            before: gcPauses.summary(started, window.t0),
            window: gcPauses.summary(window.t0, windowEnd),
            longInWindow: gcPauses.long(window.t0, windowEnd, LATE_MS),
          },
          admissionWaited: after.admission.admittedAfterWait - beforeWindow.admission.admittedAfterWait,
          admissionRefused:
            after.admission.refusedFull +
            after.admission.expired -
            beforeWindow.admission.refusedFull -
            beforeWindow.admission.expired,
        },
      };
    } finally {
      sampler.stop();
      const down = await bounded(tw.shutdown(), 30_000);
      if (down === undefined) errors.push('shutdown did not finish within 30 s');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const cfg = JSON.parse(process.argv[2] ?? '{}') as OursConfig;
await reportToParent(() => measure(cfg));
// Threads a hung shutdown left behind must not keep the child alive.
process.exit(0);
