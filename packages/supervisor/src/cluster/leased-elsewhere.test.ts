/**
 * A restart while the dead process still leases a workstream it left mid-turn (SQLite, no
 * cluster): a send is refused LEASED_ELSEWHERE — the one refusal of a lease another holder has,
 * with one shape — and once the lease expires the scheduled repair runs and the next send is
 * accepted. Time is the test's: the store's clock is shifted past the lease's expiry and the
 * repair scheduled for that expiry is fired by hand, so nothing here waits on the wall clock.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ErrorCode, openToolCalls } from '@turnwarden/protocol';
import { openSqliteStore } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { refusal, within } from '../test-support/bounded.js';
import { killInToolDebt, leaseOf } from '../test-support/crash.js';
import { startRuntime } from '../test-support/runtime.js';
import { nodeTimers, type Timers } from '../testing.js';

/** The dead process's lease: long enough that it cannot expire on its own during the test. */
const TTL_MS = 300_000;
/** Timer waits at least this long are held for the test to fire (recovery's wait for the lease). */
const HELD_FROM_MS = 60_000;

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Node's timers, except the long waits (the repair scheduled for the lease's expiry): held. */
function heldTimers() {
  const held: { ms: number; fn: () => void; cancelled: boolean }[] = [];
  const timers: Timers = {
    every: nodeTimers.every,
    after(ms, fn) {
      if (ms < HELD_FROM_MS) return nodeTimers.after(ms, fn);
      const entry = { ms, fn, cancelled: false };
      held.push(entry);
      return () => {
        entry.cancelled = true;
      };
    },
  };
  return { timers, held };
}

const root = new URL('../../../../', import.meta.url);
const read = (path: string) => readFileSync(new URL(path, root), 'utf8');

/** The part of a markdown page from `heading` to the next heading of the same level. */
function section(page: string, heading: string): string {
  const start = page.indexOf(`${heading}\n`);
  expect(start, `${heading} in the page`).toBeGreaterThanOrEqual(0);
  const level = heading.slice(0, heading.indexOf(' ') + 1);
  const end = page.indexOf(`\n${level}`, start + heading.length);
  return page.slice(start, end === -1 ? undefined : end);
}

/** Where a page documents the refusal `code`: its error table's row, or the paragraph listing it. */
function documented(page: string, code: string): string {
  const row = page.split('\n').find((l) => l.startsWith(`| \`${code}\``));
  const unit = row ?? page.split('\n\n').find((p) => !p.startsWith('|') && p.includes(`\`${code}\``));
  expect(unit, `the page documents ${code}`).toBeDefined();
  return unit!;
}

/**
 * A process (`deadHostId`) killed mid-turn holding a live lease, and a new one (`hostId`) on the
 * same file: its send is refused; once the lease expired the repair runs and a send is accepted.
 */
async function refusedUntilTheLeaseExpires(deadHostId: string | undefined, hostId: string | undefined) {
  const dir = mkdtempSync(join(tmpdir(), 'turnwarden-leased-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const dbPath = join(dir, 'turnwarden.db');
  await killInToolDebt(dbPath, TTL_MS, deadHostId);
  const dead = (await leaseOf(dbPath))!;
  expect(dead.released).toBe(false);

  // The store's clock is the wall clock until the test moves it past the lease's expiry.
  let skewMs = 0;
  const store = openSqliteStore({ path: dbPath, now: () => Date.now() + skewMs });
  cleanups.push(() => store.close());
  const { timers, held } = heldTimers();
  const rt = await startRuntime(
    {
      store,
      timers,
      lease: { ttlMs: TTL_MS, renewMs: 50 },
      ...(hostId === undefined ? {} : { hostId }),
    },
    { existing: true },
  );
  cleanups.push(() => rt.tw.shutdown());
  const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' };
  // Recovery at start could not repair it (P6) and scheduled the repair for the lease's expiry.
  expect(
    rt.logged(
      'session left mid-turn by an earlier process is still leased; repairing when the lease expires',
    ),
  ).toHaveLength(1);
  expect(held.filter((h) => !h.cancelled)).toHaveLength(1);
  const rowsBefore = await rt.history();

  const before = Date.now();
  const e = await refusal(rt.send('hello'));
  const after = Date.now();
  expect(e.code).toBe(ErrorCode.LEASED_ELSEWHERE);
  expect(e.retryable).toBe(true);
  expect(e.details).toStrictEqual({
    workstreamId: 'ws-1',
    holder: dead.holder,
    expiresAt: dead.expiresAt,
    retryAfterMs: expect.any(Number),
    ...(deadHostId === undefined ? {} : { hostId: deadHostId }),
  });
  // The time until the lease expires, as the refusal saw it: a host can wait exactly that long.
  const retryAfterMs = e.details!.retryAfterMs as number;
  expect(retryAfterMs).toBeGreaterThan(0);
  expect(retryAfterMs).toBeLessThanOrEqual(TTL_MS);
  expect(retryAfterMs).toBeGreaterThanOrEqual(dead.expiresAt - after);
  expect(retryAfterMs).toBeLessThanOrEqual(dead.expiresAt - before + 1);
  expect(await rt.history()).toEqual(rowsBefore);
  expect(openToolCalls(rowsBefore)).toHaveLength(1);

  // What a host reads says the same: the code, retryable, and every detail the runtime sent.
  const keys = Object.keys(e.details!).map((k) => `details.${k}`);
  const restart = section(read('docs/operations.md'), '## Crash and restart');
  expect(restart).toContain(`refused with \`${e.code}\``);
  expect(restart).not.toContain('TURN_IN_PROGRESS');
  for (const page of ['README.md', 'packages/supervisor/README.md']) {
    const row = documented(read(page), e.code);
    expect(row).toContain('retryable');
    for (const key of keys) expect(row, `${page} documents ${key}`).toContain(key);
  }
  for (const key of keys) expect(restart, `docs/operations.md documents ${key}`).toContain(key);
  const cluster = read('docs/cluster.md')
    .split('\n')
    .find((l) => l.includes(`**\`${e.code}\`**`));
  for (const key of keys) expect(cluster, `docs/cluster.md documents ${key}`).toContain(key);

  // The lease expires (on the store's clock) and the repair scheduled for it runs, unasked.
  skewMs = dead.expiresAt - Date.now() + 1;
  const repaired = rt.waitForLog('session left mid-turn by an earlier process repaired');
  const [scheduled] = held.filter((h) => !h.cancelled);
  scheduled!.fn();
  await within(repaired, 15_000, 'the scheduled repair after the lease expired');
  expect(await rt.tw.status(ref)).toMatchObject({ state: 'idle', cleanupPending: false });
  const rows = await rt.history();
  expect(openToolCalls(rows)).toEqual([]);
  expect(rows.at(-1)?.message).toMatchObject({ role: 'tool', effect: 'unknown', synthesized: true });
  const next = await rt.send('back?');
  expect((await within(next.done, 10_000, 'the next turn completes')).status).toBe('completed');
}

describe('a restart while the dead process still leases a workstream (SQLite, no cluster)', () => {
  it('S7 P6: the dead process had no hostId — a send is refused LEASED_ELSEWHERE (retryable) with exactly { workstreamId, holder, expiresAt, retryAfterMs }, nothing written, as the docs say; once the lease expires the scheduled repair runs and the next send is accepted', async () => {
    await refusedUntilTheLeaseExpires(undefined, undefined);
  }, 60_000);

  it('S7 P6: the dead process was another host — the same refusal also names its hostId; once the lease expires the scheduled repair runs and the next send is accepted', async () => {
    await refusedUntilTheLeaseExpires('host-a', 'host-b');
  }, 60_000);
});
