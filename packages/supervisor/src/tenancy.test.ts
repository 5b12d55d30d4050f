/**
 * T1: every call names a tenant and a principal. A call that names no principal, or a
 * malformed one, is refused before anything is read or written; the principal a call names is
 * what the history and the operator's logs record.
 */
import { ErrorCode } from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import type { Turnwarden } from './index.js';
import { refusal } from './test-support/bounded.js';
import { script, startRuntime } from './test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const caller = { tenantId: 'tenant-a', principal: 'user-a' } as const;

/** Every call of the runtime, given who calls: each names a caller and otherwise would succeed. */
function calls(tw: Turnwarden, workstreamId: string, incarnation: string) {
  const ref = { workstreamId };
  const none = () => {};
  return {
    createWorkstream: (c: object) => tw.createWorkstream({ ...c, workstreamId: 'fresh' } as never),
    subscribeWorkstreams: async (c: object) => tw.subscribeWorkstreams({ ...c, listener: none } as never),
    listWorkstreams: (c: object) => tw.listWorkstreams(c as never),
    getWorkstream: (c: object) => tw.getWorkstream({ ...c, ...ref } as never),
    status: (c: object) => tw.status({ ...c, ...ref } as never),
    history: (c: object) => tw.history({ ...c, ...ref } as never),
    subscribe: (c: object) => tw.subscribe({ ...c, ...ref, listener: none } as never),
    events: async (c: object) => {
      // Ended by its signal once its first read is asked for: a good caller reads `done`.
      const stop = new AbortController();
      const read = tw.events({ ...c, ...ref, signal: stop.signal } as never).next();
      stop.abort();
      return read;
    },
    send: (c: object) => tw.send({ ...c, ...ref, content: 'hello' } as never),
    compact: (c: object) => tw.compact({ ...c, ...ref, throughSeq: 1, summary: 'sum' } as never),
    rewind: (c: object) => tw.rewind({ ...c, ...ref, turns: 1 } as never),
    cancel: (c: object) => tw.cancel({ ...c, ...ref } as never),
    close: (c: object) => tw.close({ ...c, ...ref } as never),
    deleteWorkstream: (c: object) => tw.deleteWorkstream({ ...c, ...ref, incarnation } as never),
  } satisfies Record<string, (c: object) => Promise<unknown>>;
}

describe('T1: every call names a tenant and a principal', () => {
  it('T1: a call without a principal, or with a malformed one, is refused naming principal, and nothing is read or written', async () => {
    rt = await startRuntime();
    const { tw, workstreamId } = rt;
    await (await rt.send(script({ text: 'first' }))).done;
    const { incarnation } = await tw.getWorkstream({ ...caller, workstreamId });
    const rowsBefore = await rt.history();
    const statusBefore = await tw.status({ ...caller, workstreamId });
    const table = calls(tw, workstreamId, incarnation);
    const bad: Record<string, unknown>[] = [
      { tenantId: 'tenant-a' },
      { tenantId: 'tenant-a', principal: '' },
      { tenantId: 'tenant-a', principal: 'a b' },
      { tenantId: 'tenant-a', principal: 'x'.repeat(129) },
      { tenantId: 'tenant-a', principal: 7 },
      { principal: 'user-a' },
    ];
    for (const [name, call] of Object.entries(table)) {
      for (const who of bad) {
        const e = await refusal(call(who));
        expect(
          { name, who, code: e.code, field: e.details?.field },
          `${name} with ${JSON.stringify(who)} must be refused`,
        ).toEqual({
          name,
          who,
          code: ErrorCode.INVALID_INPUT,
          field: 'tenantId' in who ? 'principal' : 'tenantId',
        });
      }
    }
    // Nothing was written or changed: the history, the machine, the workstream list.
    expect(await rt.history()).toEqual(rowsBefore);
    expect(await tw.status({ ...caller, workstreamId })).toEqual(statusBefore);
    expect((await tw.listWorkstreams(caller)).items.map((w) => w.workstreamId)).toEqual([workstreamId]);
    expect(rt.tw.stats().turnsStarted).toBe(1);
  });

  it('T1: every call takes a well-formed caller (the same table, all accepted)', async () => {
    rt = await startRuntime();
    const { tw, workstreamId } = rt;
    await (await rt.send(script({ text: 'first' }))).done;
    const { incarnation } = await tw.getWorkstream({ ...caller, workstreamId });
    const table = calls(tw, workstreamId, incarnation);
    // In an order where each succeeds: rewind before the send it would drop, close before delete.
    const order = [
      'createWorkstream',
      'subscribeWorkstreams',
      'listWorkstreams',
      'getWorkstream',
      'status',
      'history',
      'subscribe',
      'events',
      'rewind',
      'send',
    ] as const;
    for (const name of order) await expect(table[name](caller), name).resolves.toBeDefined();
    await expect(table.cancel(caller)).resolves.toBeTypeOf('boolean');
    await expect(table.compact(caller)).resolves.toEqual({ removed: 1 });
    await expect(table.close(caller)).resolves.toBeUndefined();
    await expect(table.deleteWorkstream(caller)).resolves.toBeUndefined();
    expect(Object.keys(table).sort()).toEqual(
      [...order, 'cancel', 'compact', 'close', 'deleteWorkstream'].sort(),
    );
  });

  it('T1: the principal is recorded: on the user row it sent, and on the log lines of what it changed', async () => {
    rt = await startRuntime();
    const { tw } = rt;
    const bob = { tenantId: 'tenant-a', principal: 'bob' };
    const made = await tw.createWorkstream({ ...bob, workstreamId: 'ws-bob' });
    const turn = await tw.send({ ...bob, workstreamId: 'ws-bob', content: script({ text: 'hi' }) });
    await turn.done;
    const rows = (await tw.history({ ...caller, workstreamId: 'ws-bob' })).rows;
    expect(rows[0]?.message).toEqual({ role: 'user', content: script({ text: 'hi' }), principal: 'bob' });
    await tw.cancel({ ...caller, workstreamId: 'ws-bob' });
    await tw.close({ ...bob, workstreamId: 'ws-bob' });
    await tw.deleteWorkstream({ ...caller, workstreamId: 'ws-bob', incarnation: made.incarnation });
    const who = (msg: string) => rt!.logged(msg).map((l) => [l.workstreamId, l.principal]);
    // Log lines name a workstream by its key (T2: ids are per tenant).
    expect(who('workstream created')).toContainEqual(['tenant-a/ws-bob', 'bob']);
    expect(who('turn started')).toContainEqual(['tenant-a/ws-bob', 'bob']);
    expect(who('cancel requested')).toEqual([['tenant-a/ws-bob', 'user-a']]);
    expect(who('workstream closed')).toEqual([['tenant-a/ws-bob', 'bob']]);
    expect(who('workstream delete requested')).toEqual([['tenant-a/ws-bob', 'user-a']]);
  });
});
