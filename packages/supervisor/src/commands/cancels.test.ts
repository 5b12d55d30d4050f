/**
 * A force cancel that finds no running turn (cancels.ts), on its own over fakes: it still
 * fences the workstream at the ticket taken when the host called — a send captured before that
 * cannot start after it (C7), even when another call ended the turn before this cancel's
 * ownership check came back — and on a clean workstream it changes nothing else (C5: false).
 */
import { describe, expect, it } from 'vitest';
import { Cancels, type CancelsDeps } from './cancels.js';
import { SendQueue } from './send-queue.js';

function setup(rows: unknown[]) {
  const queue = new SendQueue(4, () => 0);
  const logs: string[] = [];
  const logger = { info: (_: unknown, msg: string) => void logs.push(msg), warn: () => {} };
  const rec = { workstreamId: 'w', state: 'idle', turn: undefined, rewrites: 0 };
  const deps = {
    logger,
    queue,
    cluster: undefined,
    sessions: {
      peek: () => rec,
      idle: (_ws: string, fn: (r: typeof rec) => Promise<boolean>) => fn(rec),
    },
    maintenance: { store: { readHistory: async () => rows } },
  } as unknown as CancelsDeps;
  return { cancels: new Cancels(deps), queue, logs };
}

describe('Cancels without a running turn', () => {
  it('C5 C7: on an idle, clean workstream it answers false and revokes the sends captured before the call, not those after', async () => {
    const { cancels, queue, logs } = setup([]);
    const before = queue.capture('w');
    const revoked: unknown[] = [];
    queue.park(before, (e) => revoked.push(e));
    const fence = queue.announce('w');
    const after = queue.capture('w');
    expect(await cancels.cancel('w', fence)).toBe(false);
    expect(revoked).toEqual([
      expect.objectContaining({ code: 'SEND_REVOKED', details: { reason: 'cancel' } }),
    ]);
    expect(queue.fencedSince(before)).toBe('cancel');
    expect(queue.fencedSince(after)).toBeUndefined();
    expect(logs).toEqual(['queued sends revoked']);
    // The dispatch waiting on the call goes on.
    expect(queue.announcedAfter(before)).toBeUndefined();
  });
});
