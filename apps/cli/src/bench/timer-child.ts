/**
 * The other process's timer: a `setInterval(intervalMs)` in a process of its own, recording how
 * late each tick ran against its schedule (as the watchdog's tick does) with the time it ran
 * (ms since the epoch). Forked by other-timer.ts; answers `{ id, from, to }` with the lateness
 * samples of the ticks that ran in [from, to]. It ends when its parent disconnects.
 *
 * A timer on the runtime's own thread cannot tell the runtime's load from the machine's: this
 * one shares only the machine (the cores, the other jobs), so it shows how late any timer was.
 */
export interface TimerChildConfig {
  readonly intervalMs: number;
}

const cfg = JSON.parse(process.argv[2] ?? '{"intervalMs":125}') as TimerChildConfig;
const at: number[] = [];
const late: number[] = [];
let due = performance.now() + cfg.intervalMs;
const timer = setInterval(() => {
  const now = performance.now();
  at.push(performance.timeOrigin + now);
  late.push(Math.max(0, now - due));
  due = Math.max(due, now) + cfg.intervalMs;
}, cfg.intervalMs);

process.on('message', (raw) => {
  const m = raw as { id: number; from: number; to: number };
  const samples: number[] = [];
  for (let i = 0; i < at.length; i++) {
    const t = at[i] ?? 0;
    if (t >= m.from && t <= m.to) samples.push(late[i] ?? 0);
  }
  process.send?.({ id: m.id, samples });
});
process.on('disconnect', () => {
  clearInterval(timer);
});
process.send?.({ ready: { intervalMs: cfg.intervalMs } });
