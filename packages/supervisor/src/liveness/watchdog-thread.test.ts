/**
 * The watchdog on a thread of its own (watchdog-thread.ts): the same watchdog, polling where the
 * supervisor's thread cannot delay it. Real threads and real time: each wait is for a condition,
 * bounded, and each test fails by an assertion when the part it is about is broken.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { Activity, ActivityClock, isFenced, SlotStamp } from '@turnwarden/clock';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { nextEvent, script, startRuntime } from '../test-support/runtime.js';
import { testControls } from '../testing.js';
import { platformScheduler } from './platform-sched.js';
import type { StallInfo, WatchdogDelegate, WatchedTurn } from './watchdog.js';
import { ThreadedWatchdog, type ThreadedWatchdogOptions } from './watchdog-thread.js';
import { readThreads, writeThreads } from './watchdog-thread-protocol.js';

const CONFIG = { timeoutMs: 300, pollMs: 30, graceMs: 250, dispatchMs: 60_000 };

/** Whether `cond` came to hold within `ms`, checking every 5 ms (the tests assert on the answer). */
async function within(cond: () => boolean, ms = 5_000): Promise<boolean> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) return false;
    await new Promise((r) => setTimeout(r, 5));
  }
  return true;
}

async function until(what: string, cond: () => boolean): Promise<void> {
  expect(await within(cond), what).toBe(true);
}

type Report = { stage: 'fired' | 'committed' | 'declined' | 'starved'; turn: WatchedTurn; info: unknown };

/** A watchdog on its own thread over a clock of two slots, its reports recorded. */
class Probe extends ThreadedWatchdog {
  kill(): Promise<number> | undefined {
    return this.thread?.terminate();
  }
}

function setup(options: Partial<ThreadedWatchdogOptions> = {}) {
  const clock = ActivityClock.create(2);
  const reports: Report[] = [];
  const delegate: WatchdogDelegate = {
    fired: (turn, info) => void reports.push({ stage: 'fired', turn, info }),
    committed: (turn, info) => void reports.push({ stage: 'committed', turn, info }),
    declined: (turn, info) => void reports.push({ stage: 'declined', turn, info }),
    starved: (turn, info) => void reports.push({ stage: 'starved', turn, info }),
  };
  const logs: { msg: string; level: number }[] = [];
  const logger = pino({ level: 'info' }, { write: (l: string) => void logs.push(JSON.parse(l)) });
  const wd = new Probe({ clock, config: CONFIG, delegate, logger, ...options });
  const armed = (slot: number, threads?: () => readonly number[]) => {
    clock.arm(slot, 7);
    const turn = wd.watch({
      slot,
      workstreamId: `ws-${slot}`,
      tenantId: 't',
      generation: 7,
      ...(threads ? { threads } : {}),
    });
    const stamp = new SlotStamp(clock.buffer, slot);
    stamp.touch(Activity.turnEntry);
    return { turn, stamp };
  };
  return { clock, wd, reports, logs, armed, stages: () => reports.map((r) => r.stage) };
}

let running: ThreadedWatchdog | undefined;
afterEach(async () => {
  await running?.stop();
  running = undefined;
});

describe('the watchdog on its own thread', () => {
  it('L1 L5 L6: a silent turn is fenced by the thread and reported in order — fired, then committed — under the object watch returned', async () => {
    const h = setup();
    running = h.wd;
    h.wd.start();
    const { turn, stamp } = h.armed(0);
    const entered = performance.now();
    await until('the stall is committed', () => h.stages().includes('committed'));
    expect(h.stages()).toEqual(['fired', 'committed']);
    expect(h.reports.every((r) => r.turn === turn)).toBe(true);
    const info = h.reports[1]!.info as StallInfo;
    expect(info).toMatchObject({ workstreamId: 'ws-0', generation: 7, slot: 0, bound: 'idle' });
    // Never early (L2's side), within the bound plus a poll and the report's way (L1).
    expect(info.idleMs).toBeGreaterThanOrEqual(CONFIG.timeoutMs);
    expect(performance.now() - entered).toBeGreaterThanOrEqual(CONFIG.timeoutMs);
    // The thread publishes NOW: the supervisor reads the stamp's idle time on its own clock.
    expect(h.wd.idleMs(turn)).toBeGreaterThanOrEqual(CONFIG.timeoutMs - CONFIG.pollMs);
    // The thread's CAS set the fence: the worker's next stamp finds the abort.
    expect(isFenced(h.clock.sample(0))).toBe(true);
    expect(stamp.touch(Activity.streamToken)).toBe(false);
    expect(turn.committed).toBe(true);
    const stats = h.wd.stats();
    expect(stats).toMatchObject({ watched: 1, fired: 1, committed: 1, declined: 0 });
    expect(stats.polls).toBeGreaterThan(5);
    expect(h.wd.placement).toBe('thread');
  });

  it('L2: a turn that keeps stamping is never fired; one unwatched is never reported again', async () => {
    const h = setup();
    running = h.wd;
    h.wd.start();
    const busy = h.armed(0);
    const gone = h.armed(1);
    h.wd.unwatch(gone.turn);
    const beat = setInterval(() => busy.stamp.touch(Activity.toolHeartbeat), 20);
    try {
      const polls = () => h.wd.stats().polls;
      // Three idle bounds of polls.
      const target = polls() + Math.ceil((3 * CONFIG.timeoutMs) / (CONFIG.pollMs / 2));
      await until('three idle bounds of polls', () => polls() >= target);
    } finally {
      clearInterval(beat);
    }
    expect(h.reports).toEqual([]);
    expect(h.wd.active()).toBe(1);
    expect(isFenced(h.clock.sample(1))).toBe(false);
    h.wd.unwatch(busy.turn);
    expect(h.wd.stats().watched).toBe(0);
    // Nothing is kept once the thread acknowledged the unwatches.
    await until('the thread acknowledges', () => h.wd.held() === 0);
  });

  it('L12: the thread polls on while the supervisor’s thread is blocked; its counters are read from shared memory', async () => {
    const h = setup();
    running = h.wd;
    h.wd.start();
    await until('the thread polls', () => h.wd.stats().polls >= 10);
    // The supervisor's thread is blocked 200 ms: the thread polls on, on time.
    const before = h.wd.stats().polls;
    const end = performance.now() + 200;
    while (performance.now() < end) {
      /* blocked */
    }
    const during = h.wd.stats();
    expect(during.polls - before).toBeGreaterThanOrEqual(5);
  });

  it('L1: a thread that exits is started again; the turns it watched are watched afresh and a stall is still aborted; counters carry over', async () => {
    const h = setup();
    running = h.wd;
    h.wd.start();
    await until('the first thread polls', () => h.wd.stats().polls >= 40);
    const { turn } = h.armed(0);
    const polls = h.wd.stats().polls;
    await h.wd.kill();
    expect(h.reports).toEqual([]);
    await until('the thread is started again', () => h.wd.restarted === 1);
    // What the first thread counted is kept (the new one counts from zero).
    expect(h.wd.stats().polls).toBeGreaterThanOrEqual(polls);
    expect(h.logs.map((l) => l.msg)).toContain('watchdog thread exited; started again');
    await until('the stall is committed', () => h.stages().includes('committed'));
    expect(h.reports.find((r) => r.stage === 'committed')!.turn).toBe(turn);
    expect(h.wd.placement).toBe('thread');
  });

  it('L1: a thread that exits before it ever polled is not tried again — the supervisor’s thread polls, every watched turn carried over under its own object', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'tw-wd-'));
    const entry = path.join(dir, 'exits.mjs');
    writeFileSync(entry, 'process.exit(7);\n');
    const h = setup({ url: pathToFileURL(entry) });
    running = h.wd;
    h.wd.start();
    const { turn } = h.armed(0);
    await until('the watchdog falls back', () => h.wd.placement === 'supervisor');
    expect(h.logs.find((l) => l.msg.includes('exited before it polled'))?.level).toBe(50);
    const later = h.armed(1);
    await until('both stalls are committed', () => h.stages().filter((s) => s === 'committed').length === 2);
    const committed = h.reports.filter((r) => r.stage === 'committed').map((r) => r.turn);
    expect(committed).toContain(turn);
    expect(committed).toContain(later.turn);
    expect(h.wd.stats().committed).toBe(2);
    expect(h.wd.restarted).toBe(0);
  });

  it('L1 L5: a thread that exits after its CAS but before reporting the outcome — the abort is reported from the fence it left, after its observational report; an attempt that had not committed is not', async () => {
    // A stand-in for the thread, once: it reports an attempt on each watched turn, commits (sets
    // the fence) on the first only, counts a poll and exits. Started again, it only polls.
    const dir = mkdtempSync(path.join(tmpdir(), 'tw-wd-'));
    const entry = path.join(dir, 'cas-then-exit.mjs');
    const marker = path.join(dir, 'crashed');
    writeFileSync(
      entry,
      `import { parentPort, workerData } from 'node:worker_threads';
       import { existsSync, writeFileSync } from 'node:fs';
       const stats = new Float64Array(workerData.stats);
       const words = new Int32Array(workerData.clock);
       setInterval(() => { stats[0] += 1; }, 10);
       if (!existsSync(${JSON.stringify(marker)})) {
         let seen = 0;
         parentPort.on('message', (batch) => batch.forEach((m) => {
           if (m.t !== 'watch') return;
           const info = { workstreamId: m.workstreamId, tenantId: m.tenantId, generation: m.generation,
             slot: m.slot, bound: 'idle', idleMs: 300, lastActivity: 'turnEntry', sampledVersion: m.version };
           parentPort.postMessage({ t: 'fired', id: m.id, info });
           if (seen++ === 0) Atomics.or(words, 16 + m.slot * 16, 1 << 31);
           if (seen === 2) {
             writeFileSync(${JSON.stringify(marker)}, '');
             stats[0] = 1;
             setTimeout(() => process.exit(1), 20);
           }
         }));
       }`,
    );
    const h = setup({ url: pathToFileURL(entry) });
    running = h.wd;
    h.wd.start();
    const a = h.armed(0);
    const b = h.armed(1);
    await until('the thread is started again', () => h.wd.restarted === 1);
    expect(h.reports.map((r) => [r.stage, r.turn === a.turn ? 'a' : 'b'])).toEqual([
      ['fired', 'a'],
      ['fired', 'b'],
      ['committed', 'a'],
    ]);
    expect(a.turn.committed).toBe(true);
    expect(b.turn.committed).toBe(false);
    expect(h.logs.map((l) => l.msg)).toContain(
      'watchdog thread exited after committing an abort it had not reported; reported now',
    );
  });

  it.runIf(platformScheduler() !== undefined)(
    'L1 L3: the turn’s threads are published to the thread as they change — a spinning thread given after the watch makes the silence wedged',
    async () => {
      const spinner = new Worker(
        `const { parentPort } = require('node:worker_threads');
         const tid = Number(require('node:fs').readlinkSync('/proc/thread-self').split('/').pop());
         parentPort.postMessage(tid);
         for (;;) {}`,
        { eval: true },
      );
      try {
        const tid = await new Promise<number>((resolve) => spinner.once('message', resolve));
        const scheduler = platformScheduler()!;
        const h = setup({ scheduler });
        running = h.wd;
        h.wd.start();
        let tids: number[] = [];
        const { turn } = h.armed(0, () => tids);
        tids = [tid];
        h.wd.threadsChanged(turn);
        await until('the stall is committed', () => h.stages().includes('committed'));
        const info = h.reports.find((r) => r.stage === 'committed')!.info as StallInfo;
        expect(info.sched?.verdict).toBe('wedged');
      } finally {
        await spinner.terminate();
      }
    },
  );

  it('the threads of a slot round-trip through the shared words, at most three', () => {
    const words = new Int32Array(8);
    writeThreads(words, 1, [11, 12, 13, 14]);
    expect(readThreads(words, 1)).toEqual([11, 12, 13]);
    expect(readThreads(words, 0)).toEqual([]);
    writeThreads(words, 1, [9]);
    expect(readThreads(words, 1)).toEqual([9]);
  });

  it('L12: a runtime started without test seams watches on its own thread, and fences a stall while the supervisor’s thread is blocked', async () => {
    const rt = await startRuntime({
      watchdog: { timeoutMs: 300, pollMs: 30, graceMs: 250 },
      models: { placement: 'session' },
    });
    try {
      expect(rt.logged('turnwarden supervisor started')[0]).toMatchObject({ watchdogThread: true });
      const token = nextEvent(rt.tw, rt.workstreamId, 'token');
      const turn = await rt.send(script({ text: 'working' }, { stall: true }));
      await token;
      // From here the turn is silent. The supervisor's thread does not yield until a slot is fenced.
      const controls = testControls(rt.tw);
      const words = new Int32Array(controls.clockBuffer);
      const slot = controls.turnSlot('tenant-a', rt.workstreamId);
      if (slot === undefined) throw new Error('the streaming turn holds no clock slot');
      const fenced = () => isFenced(Atomics.load(words, 16 + slot * 16));
      const end = performance.now() + 5_000;
      while (!fenced() && performance.now() < end) {
        /* blocked: no timer, no message of this thread runs */
      }
      expect(fenced()).toBe(true);
      const result = await turn.done;
      expect(result).toMatchObject({ status: 'interrupted', abortReason: 'watchdog' });
      const msgs = rt.logs.map((l) => l.msg);
      expect(msgs.indexOf('turn liveness watchdog fired; attempting recovery')).toBeGreaterThanOrEqual(0);
      expect(msgs.indexOf('watchdog aborted turn; lease renewal stopped')).toBeGreaterThan(
        msgs.indexOf('turn liveness watchdog fired; attempting recovery'),
      );
    } finally {
      await rt.tw.shutdown();
    }
  });
});
