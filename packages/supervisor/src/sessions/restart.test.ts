/**
 * A supervisor killed mid-turn (SIGKILL, no cleanup) and a new one started on the same file:
 * the session machine is restored from its last durable snapshot — tool-debt — and brought to
 * idle through force-abandoning with a repaired history before any new turn (S7, T7).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openToolCalls } from '@turnwarden/protocol';
import { openSqliteStore } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { within } from '../test-support/bounded.js';
import { killInToolDebt, leaseOf } from '../test-support/crash.js';
import { startRuntime } from '../test-support/runtime.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('restart after a crash', () => {
  it('S7 T7: killed in tool-debt, the session is restored from its snapshot, repaired through force-abandoning, and idle before the next turn', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'turnwarden-restart-'));
    dirs.push(dir);
    const dbPath = join(dir, 'turnwarden.db');
    await killInToolDebt(dbPath);

    // What the killed process left: the machine in tool-debt, one open call, a live lease.
    const store = openSqliteStore({ path: dbPath });
    const left = await store.getWorkstream('tenant-a/ws-1');
    expect(left?.session?.value).toEqual({ 'tool-debt': 'running' });
    expect(openToolCalls(await store.readHistory('tenant-a/ws-1'))).toHaveLength(1);
    const lease = await store.getLease('tenant-a/ws-1');
    expect(lease?.released).toBe(false);
    await store.close();
    // The lease must expire before anyone else may write (P6): wait for it, bounded.
    const waitMs = Math.max(0, lease!.expiresAt - Date.now()) + 50;
    await new Promise((resolve) => setTimeout(resolve, waitMs));

    const rt = await startRuntime({ store: { path: dbPath } }, { existing: true });
    try {
      const status = await rt.tw.status({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' });
      expect(status).toMatchObject({ state: 'idle', cleanupPending: false });
      const steps = rt
        .logged('session transition')
        .filter((l) => l.workstreamId === 'tenant-a/ws-1')
        .map((l) => `${String(l.from)} --${String(l.via)}--> ${String(l.to)}`);
      expect(steps).toEqual([
        'tool-debt.running --ABORT--> force-abandoning.pending',
        'force-abandoning.pending --REPAIR--> force-abandoning.repairing',
        'force-abandoning.repairing --xstate.done.actor.repair--> idle',
      ]);
      const rows = (await rt.tw.history({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' }))
        .rows;
      expect(openToolCalls(rows)).toEqual([]);
      const tools = rows.flatMap((r) => (r.message.role === 'tool' ? [r.message] : []));
      expect(tools).toEqual([
        expect.objectContaining({ content: 'done before', effect: 'applied' }),
        expect.objectContaining({ effect: 'unknown', synthesized: true }),
      ]);
      const next = await rt.tw.send({
        tenantId: 'tenant-a',
        principal: 'user-a',
        workstreamId: 'ws-1',
        content: 'back?',
      });
      expect((await within(next.done, 10_000, 'the next turn completes')).status).toBe('completed');
    } finally {
      await rt.tw.shutdown();
    }
  }, 60_000);

  it('S7: restarted while the dead process’s lease is still live, the session is repaired when the lease expires, without a cancel', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'turnwarden-restart-'));
    dirs.push(dir);
    const dbPath = join(dir, 'turnwarden.db');
    // A lease that outlives the new supervisor's start by seconds, whatever the machine's load.
    await killInToolDebt(dbPath, 4_000);
    const rt = await startRuntime({ store: { path: dbPath } }, { existing: true });
    try {
      const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' };
      // Nobody may write into a turn someone else may still hold (P6): not repaired yet, scheduled.
      const [scheduled] = rt.logged(
        'session left mid-turn by an earlier process is still leased; repairing when the lease expires',
      );
      expect(scheduled).toMatchObject({ workstreamId: 'tenant-a/ws-1' });
      expect(scheduled!.retryInMs).toBeGreaterThan(0);
      expect((await rt.tw.status(ref)).state).not.toBe('idle');
      // When the lease expires the session is repaired on its own: nothing calls cancel.
      const repaired = 'session left mid-turn by an earlier process repaired';
      if (rt.logged(repaired).length === 0) {
        await within(rt.waitForLog(repaired), 15_000, 'the scheduled repair after the lease expired');
      }
      expect((await rt.tw.status(ref)).state).toBe('idle');
      const rows = (await rt.tw.history(ref)).rows;
      expect(openToolCalls(rows)).toEqual([]);
      expect(rows.at(-1)?.message).toMatchObject({ role: 'tool', effect: 'unknown', synthesized: true });
      const next = await rt.tw.send({ ...ref, content: 'back?' });
      expect((await within(next.done, 10_000, 'the next turn completes')).status).toBe('completed');
    } finally {
      await rt.tw.shutdown();
    }
  }, 60_000);

  it('S7: a host restarted with its stable hostId takes over its dead predecessor’s live lease at start: the first history() is already repaired and the first send is accepted at once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'turnwarden-restart-'));
    dirs.push(dir);
    const dbPath = join(dir, 'turnwarden.db');
    // SIGKILLed in the middle of a tool, holding a lease that would stay live for a minute.
    await killInToolDebt(dbPath, 60_000, 'host-a');
    const probe = openSqliteStore({ path: dbPath });
    const dead = (await probe.getLease('tenant-a/ws-1'))!;
    await probe.close();
    expect(dead.holder.startsWith('host-a:')).toBe(true);
    expect(dead.released).toBe(false);
    expect(dead.expiresAt - Date.now()).toBeGreaterThan(30_000);

    const rt = await startRuntime({ store: { path: dbPath }, hostId: 'host-a' }, { existing: true });
    try {
      const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' };
      // Repaired during start, before any call: nothing was deferred to the lease's expiry.
      const rows = (await rt.tw.history(ref)).rows;
      expect(openToolCalls(rows)).toEqual([]);
      expect(rows.at(-1)?.message).toMatchObject({ role: 'tool', effect: 'unknown', synthesized: true });
      expect(await rt.tw.status(ref)).toMatchObject({ state: 'idle', cleanupPending: false });
      expect(
        rt.logged(
          'session left mid-turn by an earlier process is still leased; repairing when the lease expires',
        ),
      ).toEqual([]);
      // The takeover fenced the dead process's token (P6).
      const now = (await leaseOf(dbPath))!;
      expect(now.token).toBeGreaterThan(dead.token);
      expect(now.holder.startsWith('host-a:')).toBe(true);
      expect(now.holder).not.toBe(dead.holder);
      const next = await rt.tw.send({ ...ref, content: 'back?' });
      expect((await within(next.done, 10_000, 'the next turn completes')).status).toBe('completed');
    } finally {
      await rt.tw.shutdown();
    }
  }, 60_000);

  it('S7: a restart under another hostId respects the dead host’s live lease (no takeover)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'turnwarden-restart-'));
    dirs.push(dir);
    const dbPath = join(dir, 'turnwarden.db');
    await killInToolDebt(dbPath, 60_000, 'host-a');
    const rt = await startRuntime({ store: { path: dbPath }, hostId: 'host-b' }, { existing: true });
    try {
      const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' };
      expect(openToolCalls((await rt.tw.history(ref)).rows)).toHaveLength(1);
      // Until the repair is done, status() reports the debt.
      expect(await rt.tw.status(ref)).toMatchObject({ state: 'tool-debt', cleanupPending: true });
      expect(
        rt.logged(
          'session left mid-turn by an earlier process is still leased; repairing when the lease expires',
        ),
      ).toHaveLength(1);
      expect((await leaseOf(dbPath))!.holder.startsWith('host-a:')).toBe(true);
    } finally {
      await rt.tw.shutdown();
    }
  }, 60_000);
});
