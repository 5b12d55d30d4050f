/**
 * Several hosts on one store, in one process (issue 13): two runtimes with host ids share a
 * store and a notification channel (test-support/memory-channel.ts — what LISTEN/NOTIFY gives
 * the PostgreSQL store; cluster.pg.test.ts runs hosts as processes against a real PostgreSQL).
 */
import { ErrorCode } from '@turnwarden/protocol';
import { newSession, offer } from '@turnwarden/session';
import { openSqliteStore, type Store } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import type { TurnwardenEvent } from '../index.js';
import { refusal, within } from '../test-support/bounded.js';
import { MemoryChannelBus } from '../test-support/memory-channel.js';
import { nextEvent, script, startRuntime } from '../test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
const running: Rt[] = [];
let store: Store | undefined;
afterEach(async () => {
  for (const rt of running.splice(0)) await rt.tw.shutdown();
  await store?.close();
  store = undefined;
});

const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' };
const LONG_TOOL = script({ tools: [{ name: 'heartbeat', args: { ms: 60_000, everyMs: 20 } }] });

async function twoHosts(options: Parameters<typeof startRuntime>[0] = {}) {
  store = openSqliteStore({ path: ':memory:' });
  const bus = new MemoryChannelBus();
  const a = await startRuntime({ ...options, store: bus.view(store), hostId: 'host-a' });
  const b = await startRuntime({ ...options, store: bus.view(store), hostId: 'host-b' }, { existing: true });
  running.push(a, b);
  return { a, b, bus, store };
}

const messages = (events: readonly TurnwardenEvent[]) =>
  events.flatMap((e) => (e.type === 'message' ? [e.data.seq] : []));

describe('several hosts on one store', () => {
  it('with queueing off (limits.maxQueuedSends 0), a send to a host whose workstream runs on another is refused with LEASED_ELSEWHERE naming that host; nothing is written', async () => {
    // With queueing on, it is queued durably instead (queued-sends.test.ts).
    const { a, b } = await twoHosts({ limits: { maxQueuedSends: 0 } });
    const turn = await a.send(LONG_TOOL);
    await nextEvent(a.tw, ref.workstreamId, 'tool_started');
    const rowsBefore = (await b.history()).length;
    const e = await refusal(b.send('from the other host'));
    expect(e.code).toBe(ErrorCode.LEASED_ELSEWHERE);
    expect(e.retryable).toBe(true);
    // The one shape of this refusal, as after a restart (leased-elsewhere.test.ts).
    expect(e.details).toStrictEqual({
      workstreamId: 'ws-1',
      holder: expect.stringMatching(/^host-a:/),
      expiresAt: expect.any(Number),
      retryAfterMs: expect.any(Number),
      hostId: 'host-a',
    });
    expect(e.details!.retryAfterMs).toBeGreaterThan(0);
    expect(e.details!.retryAfterMs).toBeLessThanOrEqual(a.tw.config.lease.ttlMs);
    expect((await b.history()).length).toBe(rowsBefore);
    await a.tw.cancel(ref);
    await within(turn.done, 10_000, 'the turn ends');
    // B did not keep the mid-turn machine it read: it sees the session as it is now, and serves it.
    expect(await b.tw.status(ref)).toMatchObject({ state: 'idle', cleanupPending: false });
    const next = await b.send(script({ text: 'on host b' }));
    expect((await within(next.done, 10_000, 'the next turn')).status).toBe('completed');
  });

  it('a cancel called on another host reaches the holder: its turn ends cancelled with a complete history, and the next turn runs anywhere', async () => {
    const { a, b } = await twoHosts();
    const turn = await a.send(LONG_TOOL);
    await nextEvent(a.tw, ref.workstreamId, 'tool_started');
    expect(await within(b.tw.cancel(ref), 10_000, 'the routed cancel answers')).toBe(true);
    const result = await within(turn.done, 10_000, 'the cancelled turn settles');
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'cancel', synthesized: 1 });
    expect(b.tw.stats().cluster).toMatchObject({ routedOut: 1, routedFallbacks: 0 });
    expect(a.tw.stats().cluster).toMatchObject({ routedIn: 1 });
    const rows = await b.history();
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool']);
    // The lease was released: host B serves the next turn.
    const next = await b.send(script({ text: 'on host b' }));
    expect((await within(next.done, 10_000, 'the next turn')).status).toBe('completed');
  });

  it('E1: a listener on another host follows the rows the running host journals, in seq order, once each', async () => {
    const { a, b } = await twoHosts();
    const turn = await a.send(script({ tools: [{ name: 'echo', args: { text: 'x' } }] }, { text: 'done' }));
    await within(turn.done, 10_000, 'the turn');
    const rows = await a.history();
    // Delivery crosses the channel asynchronously: wait for the last row to arrive on B.
    await within(
      new Promise<void>((resolve) => {
        const check = () => (messages(b.events).includes(rows.at(-1)!.seq) ? resolve() : setImmediate(check));
        check();
      }),
      10_000,
      'the last row followed on host B',
    );
    expect(messages(b.events)).toEqual(rows.map((r) => r.seq));
    expect(messages(a.events)).toEqual(rows.map((r) => r.seq));
    expect(b.tw.stats().cluster?.followedRows).toBe(rows.length);
  });

  it('E1: rows are delivered once each when turns alternate between the hosts (local rows are not followed again)', async () => {
    const { a, b } = await twoHosts();
    const turn = async (rt: Rt, text: string) => {
      const t = await rt.send(script({ tools: [{ name: 'echo', args: { text } }] }, { text }));
      expect((await within(t.done, 10_000, 'a turn')).status).toBe('completed');
    };
    await turn(a, 'one');
    await turn(b, 'two');
    await turn(a, 'three');
    const rows = await a.history();
    await within(
      new Promise<void>((resolve) => {
        const check = () => (messages(b.events).includes(rows.at(-1)!.seq) ? resolve() : setImmediate(check));
        check();
      }),
      10_000,
      'the last row followed on host B',
    );
    expect(rows).toHaveLength(12);
    expect(messages(b.events)).toEqual(rows.map((r) => r.seq));
    expect(messages(a.events)).toEqual(rows.map((r) => r.seq));
  });

  it('a routed call is served only while its holder still holds the lease it was routed by; malformed notifications are ignored', async () => {
    const { a, bus, store } = await twoHosts();
    const channel = bus.view(store) as unknown as { notify(c: string, p: string): Promise<void> };
    const turn = await a.send(LONG_TOOL);
    await nextEvent(a.tw, ref.workstreamId, 'tool_started');
    const lease = (await store.getLease('tenant-a/ws-1'))!;
    const replyTo = async (id: string) => {
      for (;;) {
        const found = bus.sent.find(
          (m) => m.payload.includes(`"id":"${id}"`) && m.payload.includes('"k":"rep"'),
        );
        if (found) return JSON.parse(found.payload) as { ok: boolean; stale?: boolean; result?: unknown };
        await new Promise((r) => setImmediate(r));
      }
    };
    for (const junk of ['null', '{"k":"req"}', '[1]', 'not json'])
      await channel.notify('turnwarden_control', junk);
    const req = (id: string, token: number) =>
      JSON.stringify({
        k: 'req',
        id,
        to: lease.holder,
        from: 'host-x:1',
        ws: 'tenant-a/ws-1',
        token,
        op: 'cancel',
      });
    // Routed by an older lease (a request held up, say, through a pause): not acted on.
    await channel.notify('turnwarden_control', req('old', lease.token - 1));
    expect(await within(replyTo('old'), 10_000, 'the stale answer')).toMatchObject({
      ok: false,
      stale: true,
    });
    expect(a.tw.stats().activeTurns).toBe(1);
    expect(a.logged('malformed control message ignored')).toHaveLength(4);
    // Routed by the live lease: served.
    await channel.notify('turnwarden_control', req('live', lease.token));
    expect(await within(replyTo('live'), 10_000, 'the answer')).toMatchObject({ ok: true, result: true });
    expect((await within(turn.done, 10_000, 'the turn')).abortReason).toBe('cancel');
  });

  it('a delete called on another host aborts the turn where it runs, deletes, and closes listeners on both hosts (D6)', async () => {
    const { a, b, store } = await twoHosts();
    const turn = await a.send(LONG_TOOL);
    await nextEvent(a.tw, ref.workstreamId, 'tool_started');
    const { incarnation } = await b.tw.getWorkstream(ref);
    await within(b.tw.deleteWorkstream({ ...ref, incarnation }), 10_000, 'the routed delete');
    expect((await within(turn.done, 10_000, 'the turn')).abortReason).toBe('workstream_gone');
    expect(await store.getWorkstream('tenant-a/ws-1')).toBeUndefined();
    expect(a.types()).toContain('ws_closed');
    expect(b.types()).toContain('ws_closed');
  });

  it('a soft close with no wait on another host is refused by the holder (TURN_IN_PROGRESS); the turn runs on', async () => {
    const { a, b } = await twoHosts();
    const turn = await a.send(LONG_TOOL);
    await nextEvent(a.tw, ref.workstreamId, 'tool_started');
    const e = await refusal(b.tw.close(ref));
    expect(e.code).toBe(ErrorCode.TURN_IN_PROGRESS);
    expect(a.tw.stats().activeTurns).toBe(1);
    await a.tw.cancel(ref);
    await within(turn.done, 10_000, 'the turn ends');
  });

  it('S7: a host that died mid-turn is taken over once its lease expires — a cancel routed to it falls back, and the sweep repairs unasked', async () => {
    // The store's clock stands still until the test moves it: the dead host's lease is live
    // when the cancel is routed, however long host B took to start (on a loaded machine it took
    // longer than the lease's 400 ms, and the cancel was never routed), and expires when moved.
    let clock = Date.now();
    store = openSqliteStore({ path: ':memory:', now: () => clock });
    const bus = new MemoryChannelBus();
    // A dead host's turn, as its writes left it: lease, user row, a tool call, a streaming machine.
    await store.createWorkstream({ id: 'tenant-a/ws-1', tenantId: 'tenant-a' });
    await store.createWorkstream({ id: 'tenant-a/ws-2', tenantId: 'tenant-a' });
    for (const id of ['tenant-a/ws-1', 'tenant-a/ws-2']) {
      const generation = await store.nextGeneration(id);
      const lease = (await store.acquireLease(id, 'host-z:dead', 400))!;
      const claimed = offer(newSession(id), { type: 'CLAIM', generation })!;
      await store.appendMessages({
        workstreamId: id,
        generation,
        fencingToken: lease.token,
        entries: [
          { commitKey: `g${generation}:u`, message: { role: 'user', content: 'hi' } },
          {
            commitKey: `g${generation}:a0`,
            message: {
              role: 'assistant',
              content: '',
              toolCalls: [{ id: 'c1', name: 'echo', arguments: '{}' }],
            },
          },
        ],
        session: claimed,
      });
    }
    const b = await startRuntime({ store: bus.view(store), hostId: 'host-b' }, { existing: true });
    running.push(b);
    // ws-1: a cancel routed to the dead holder gets no answer; once its lease lapses — or the
    // sweep took it over — the cancel runs here. Either way it repaired ws-1 exactly once.
    const cancelling = b.tw.cancel(ref);
    await within(
      (async () => {
        while (b.tw.stats().cluster?.routedOut !== 1) await new Promise((r) => setTimeout(r, 5));
      })(),
      10_000,
      'the cancel is routed to the holder',
    );
    clock += 1_000; // the dead holder's leases expire
    const cancelled = await within(cancelling, 10_000, 'the cancel falls back');
    expect(b.tw.stats().cluster).toMatchObject({ routedOut: 1, routedFallbacks: 1 });
    const rows = await b.history();
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool']);
    expect(rows[2]?.message).toMatchObject({ role: 'tool', toolCallId: 'c1', synthesized: true });
    // ws-2: nobody asked; the failover sweep (every renewal period) repairs it once the lease
    // expired. How soon is cluster-routing.test.ts's subject, on virtual time; here it is that
    // it happens, bounded generously for a loaded machine.
    const repaired = await within(
      (async () => {
        for (;;) {
          const rows = await store!.readHistory('tenant-a/ws-2');
          if (rows.length >= 3) return rows;
          await new Promise((r) => setTimeout(r, 20));
        }
      })(),
      10_000,
      'the sweep repairs ws-2',
    );
    expect(repaired.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool']);
    expect(b.tw.stats().cluster?.failovers).toBe(cancelled ? 1 : 2);
    const lease = await store.getLease('tenant-a/ws-2');
    expect(lease).toMatchObject({ released: true });
    expect(lease?.holder.startsWith('host-b:')).toBe(true);
    const next = await b.tw.send({ ...ref, workstreamId: 'ws-2', content: script({ text: 'served' }) });
    expect((await within(next.done, 10_000, 'the next turn on ws-2')).status).toBe('completed');
  });
});
