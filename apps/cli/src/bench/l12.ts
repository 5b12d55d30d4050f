/**
 * L12 — the watchdog is never starved. Poll lateness (`tw.stats().watchdog.pollLateness`) of a
 * fresh runtime per phase: quiet; 1,000 idle workstreams; a session streaming 1-character
 * tokens as fast as it can; the store committing back-to-back transactions on the supervisor's
 * thread (synchronous NORMAL, the default); all three at once; the writes again with synchronous
 * FULL (an fsync per commit). Every phase also runs one heartbeating turn, so the poll has a
 * live turn to sample. Baseline: a raw setInterval at the same period in the same phase,
 * measuring its own lateness the same way — the event loop's slack under that load.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteStore } from '@turnwarden/store';
import { Turnwarden } from '@turnwarden/supervisor';
import { SCRIPTED } from '../scripted.js';
import { type BenchContext, PRINCIPAL, script, TENANT, within } from './common.js';
import { type Row, row, type SectionResult, target } from './report.js';
import { latenessProbe, max, quantile, sleep, yieldToLoop } from './stats.js';

const POLL_MS = 20;
const INTERVAL_MS = POLL_MS / 2; // the watchdog ticks every pollMs / 2
/** Target chosen for this bench: the same scheduling slack the L1 target allows (pollMs + 5 ms). */
const P99_TARGET_MS = 5;

interface Load {
  readonly idle: boolean;
  readonly busy: boolean;
  readonly writes: boolean;
  /** PRAGMA synchronous of the phase's store (the store's default is NORMAL). */
  readonly sync: 'NORMAL' | 'FULL';
}

interface PhaseResult {
  readonly name: string;
  readonly ours: { readonly p50: number; readonly p99: number; readonly max: number; readonly polls: number };
  readonly probe: { readonly p50: number; readonly p99: number; readonly max: number };
  readonly info: string;
}

async function phase(
  name: string,
  load: Load,
  windowMs: number,
  dir: string,
  ctx: BenchContext,
): Promise<PhaseResult> {
  const store = openSqliteStore({ path: join(dir, `${name}.db`), synchronous: load.sync });
  // Workstreams exist before the runtime starts: the histogram covers the runtime's whole life,
  // and creating them is not the load under test.
  if (load.idle) {
    for (let i = 0; i < 1000; i++) await store.createWorkstream({ id: `idle-${i}`, tenantId: TENANT });
  }
  const writer = await store.createWorkstream({ id: 'writer', tenantId: TENANT });
  const writerGeneration = await store.nextGeneration(writer.id);
  const watched = await store.createWorkstream({ id: 'watched', tenantId: TENANT });
  const busy = await store.createWorkstream({ id: 'busy', tenantId: TENANT });
  const tw = await Turnwarden.start({
    ...SCRIPTED,
    store,
    logger: ctx.logger,
    watchdog: { timeoutMs: 5_000, pollMs: POLL_MS, graceMs: 200 },
    pool: { maxWorkers: 4, warmWorkers: 2 },
  });
  const probe = latenessProbe(INTERVAL_MS);
  const info: string[] = [];
  let running = true;
  const loads: Promise<void>[] = [];
  try {
    const heartbeat = await tw.send({
      tenantId: TENANT,
      principal: PRINCIPAL,
      workstreamId: watched.id,
      content: script([{ heartbeat: 600_000, everyMs: 20 }]),
    });
    let tokens = 0;
    if (load.busy) {
      await tw.subscribe({
        tenantId: TENANT,
        principal: PRINCIPAL,
        workstreamId: busy.id,
        listener: (e) => {
          if (e.type === 'token') tokens++;
        },
      });
      // 20 × 10,000 one-character tokens per turn (the message stays under maxMessageBytes);
      // a new turn follows each one until the window ends.
      const content = script(
        Array.from({ length: 20 }, () => ({ text: 'x'.repeat(10_000), chunks: 10_000 })),
      );
      loads.push(
        (async () => {
          while (running) {
            const h = await tw.send({
              tenantId: TENANT,
              principal: PRINCIPAL,
              workstreamId: busy.id,
              content,
            });
            await h.done;
          }
        })(),
      );
    }
    const writeMs: number[] = [];
    if (load.writes) {
      loads.push(
        (async () => {
          const body = 'w'.repeat(512);
          for (let i = 0; running; i++) {
            const t0 = performance.now();
            await store.appendMessages({
              workstreamId: writer.id,
              generation: writerGeneration,
              entries: Array.from({ length: 20 }, (_, j) => ({
                commitKey: `w${i}:${j}`,
                message: { role: 'user' as const, content: body },
              })),
            });
            writeMs.push(performance.now() - t0);
            await yieldToLoop();
          }
        })(),
      );
    }
    const t0 = performance.now();
    await sleep(windowMs);
    const elapsed = (performance.now() - t0) / 1000;
    const wd = tw.stats().watchdog;
    running = false;
    const samples = probe.stop();
    if (load.busy) await tw.cancel({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: busy.id });
    // A busy turn claimed just as the window closed ends with the shutdown below.
    await within(Promise.all(loads), 2_000);
    if (load.busy)
      info.push(`${Math.round(tokens / elapsed).toLocaleString('en-US')} tokens/s delivered to the listener`);
    if (load.writes) {
      info.push(
        `${Math.round((writeMs.length * 20) / elapsed).toLocaleString('en-US')} rows/s in 20-row transactions (p99 ${quantile(writeMs, 0.99).toFixed(2)} ms, max ${max(writeMs).toFixed(2)} ms each)`,
      );
    }
    if (load.idle) info.push('1,000 idle workstreams');
    const cancelled = await within(
      tw.cancel({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: watched.id }),
      5_000,
    );
    if (cancelled === undefined) info.push('heartbeat turn did not cancel within 5 s');
    await within(heartbeat.done, 5_000);
    return {
      name,
      ours: { p50: wd.pollLateness.p50, p99: wd.pollLateness.p99, max: wd.pollLateness.max, polls: wd.polls },
      probe: { p50: quantile(samples, 0.5), p99: quantile(samples, 0.99), max: max(samples) },
      info: info.join('; '),
    };
  } finally {
    running = false;
    probe.stop();
    await tw.shutdown();
    await store.close();
  }
}

export async function benchL12(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const windowMs = ctx.quick ? 600 : 2_000;
  const dir = mkdtempSync(join(tmpdir(), 'turnwarden-bench-l12-'));
  const phases: [string, Load][] = [
    ['quiet', { idle: false, busy: false, writes: false, sync: 'NORMAL' }],
    ['1000-idle', { idle: true, busy: false, writes: false, sync: 'NORMAL' }],
    ['busy-stream', { idle: false, busy: true, writes: false, sync: 'NORMAL' }],
    ['store-writes', { idle: false, busy: false, writes: true, sync: 'NORMAL' }],
    ['all-three', { idle: true, busy: true, writes: true, sync: 'NORMAL' }],
    ['store-writes-FULL', { idle: false, busy: false, writes: true, sync: 'FULL' }],
  ];
  const results: PhaseResult[] = [];
  try {
    for (const [name, load] of phases) results.push(await phase(name, load, windowMs, dir, ctx));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const rows: Row[] = [];
  for (const r of results) {
    rows.push(
      row(`poll lateness p99, ${r.name}`, 'ms', r.ours.p99, {
        baseline: r.probe.p99,
        target: target(`≤ ${P99_TARGET_MS} ms`, r.ours.p99 <= P99_TARGET_MS),
      }),
      row(`poll lateness max, ${r.name}`, 'ms', r.ours.max, { baseline: r.probe.max }),
    );
  }
  const worst = (f: (r: PhaseResult) => number) => Math.max(...results.map(f));
  rows.push(
    row(
      'bound: worst p99, all phases',
      'ms',
      worst((r) => r.ours.p99),
      { baseline: worst((r) => r.probe.p99) },
    ),
    row(
      'bound: worst max, all phases',
      'ms',
      worst((r) => r.ours.max),
      { baseline: worst((r) => r.probe.max) },
    ),
  );
  return {
    name: 'l12',
    title: `watchdog starvation (L12), poll every ${INTERVAL_MS} ms (pollMs ${POLL_MS})`,
    ours: 'tw.stats().watchdog.pollLateness of a fresh runtime per phase (0.1 ms buckets), one heartbeating turn watched',
    baseline: `raw setInterval(${INTERVAL_MS} ms) in the same phase, lateness measured the same way`,
    rows,
    notes: [
      `${(windowMs / 1000).toFixed(1)} s per phase on a file store in the OS temp dir (WAL, synchronous NORMAL = the store's default; the last phase FULL, an fsync per commit); the runtime's histogram covers the whole phase from start`,
      ...results.map(
        (r) =>
          `${r.name}: ${r.ours.polls} polls, p50 ${r.ours.p50.toFixed(1)} ms (raw timer ${r.probe.p50.toFixed(1)} ms)${r.info === '' ? '' : `; ${r.info}`}`,
      ),
      `target (ours, not from the spec): p99 ≤ ${P99_TARGET_MS} ms, the scheduling slack the L1 target allows on top of pollMs`,
      'a store write runs synchronously on the supervisor thread (better-sqlite3): the max lateness tracks the longest write',
      'busy-stream is a flood (delayMs 0): the worker posts one message per token without yielding, and the host thread drains the whole queue of a port in one go — timers (watchdog included) wait meanwhile',
    ],
  };
}
