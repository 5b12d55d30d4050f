/**
 * T2: workstream ids are per tenant. Two tenants may use the same id: each has its own
 * workstream — its history, events, queue, lease, lifecycle and deletion — and nothing a call
 * answers names the other's, nor the key the runtime keeps them by (`<tenant>/<id>`).
 */
import { ErrorCode, TurnwardenError, workstreamKey } from '@turnwarden/protocol';
import { openSqliteStore } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import type { WorkstreamLifecycleEvent } from './index.js';
import type { TurnwardenEvent } from './streams/events.js';
import { refusal, within } from './test-support/bounded.js';
import { assistantRow, faultyStore } from './test-support/faulty-store.js';
import { nextEvent, script, startRuntime } from './test-support/runtime.js';
import { testControls } from './testing.js';
import type { PersistenceStatus } from './types.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const HOST_TOOLS = new URL('./test-support/connected-host-tools.mjs', import.meta.url).href;
const A = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' } as const;
const B = { tenantId: 'tenant-b', principal: 'user-b', workstreamId: 'ws-1' } as const;

/** Both tools, then the text: what the tools' contexts say lands in the history. */
const whoami = (text: string) =>
  script(
    {
      tools: [
        { name: 'whoami', args: {} },
        { name: 'host_whoami', args: {} },
      ],
    },
    { text },
  );

describe('T2: per-tenant workstream ids', () => {
  it('T2: two tenants use the same workstream id — each its own workstream, through every call, and no answer names the other’s or the key', async () => {
    const store = openSqliteStore({ path: ':memory:' });
    rt = await startRuntime({ store, hostToolModules: [HOST_TOOLS] });
    const { tw } = rt;
    const outputs: unknown[] = [];
    const seen = <T>(value: T): T => {
      outputs.push(value);
      return value;
    };
    const feeds = { a: [] as WorkstreamLifecycleEvent[], b: [] as WorkstreamLifecycleEvent[] };
    tw.subscribeWorkstreams({
      tenantId: A.tenantId,
      principal: A.principal,
      listener: (e) => feeds.a.push(e),
    });
    tw.subscribeWorkstreams({
      tenantId: B.tenantId,
      principal: B.principal,
      listener: (e) => feeds.b.push(e),
    });

    // Tenant A has ws-1 (startRuntime made it). Tenant B makes its own: not WORKSTREAM_EXISTS.
    const mine = seen(await tw.getWorkstream(A));
    const made = seen(await tw.createWorkstream(B).catch((e: unknown) => e));
    expect(made).toMatchObject({ workstreamId: 'ws-1', tenantId: 'tenant-b' });
    const theirs = made as { incarnation: string };
    expect(theirs.incarnation).not.toBe(mine.incarnation);
    const eventsB: TurnwardenEvent[] = [];
    await tw.subscribe({ ...B, listener: (e) => eventsB.push(e) });

    // Both turns at once: each its own queue and lease, each tool told its own tenant.
    const [ta, tb] = await Promise.all([
      tw.send({ ...A, content: whoami('answer a') }),
      tw.send({ ...B, content: whoami('answer b') }),
    ]);
    const [ra, rb] = await within(Promise.all([ta.done, tb.done]), 20_000, 'both turns');
    expect([ra.status, rb.status]).toEqual(['completed', 'completed']);
    expect([ta.workstreamId, tb.workstreamId, ra.workstreamId, rb.workstreamId]).toEqual([
      'ws-1',
      'ws-1',
      'ws-1',
      'ws-1',
    ]);
    seen([ta.workstreamId, ra, rb]);
    const told = async (ref: typeof A | typeof B) =>
      seen((await tw.history(ref)).rows)
        .filter((r) => r.message.role === 'tool' || r.message.role === 'assistant')
        .map((r) => (r.message.role === 'tool' ? JSON.parse(r.message.content) : r.message.content))
        .filter((c) => c !== '');
    const who = (tenantId: string) => ({ tenantId, workstreamId: 'ws-1' });
    expect(await told(A)).toEqual([who('tenant-a'), who('tenant-a'), 'answer a']);
    expect(await told(B)).toEqual([who('tenant-b'), who('tenant-b'), 'answer b']);

    // Each tenant's listener heard its own turn only, every event naming the id it gave.
    const said = (events: readonly TurnwardenEvent[]) =>
      events.flatMap((e) =>
        e.type === 'message' && e.data.message.role === 'assistant' ? [e.data.message.content] : [],
      );
    expect(said(rt.events).filter((c) => c !== '')).toEqual(['answer a']);
    expect(said(eventsB).filter((c) => c !== '')).toEqual(['answer b']);
    expect(new Set([...rt.events, ...eventsB].map((e) => e.workstreamId))).toEqual(new Set(['ws-1']));
    seen([rt.events, eventsB]);

    // Status, lists and the store: two workstreams, one per tenant, keyed apart.
    const status = seen([await tw.status(A), await tw.status(B)]);
    expect(status.map((s) => [s.tenantId, s.workstreamId, s.generation])).toEqual([
      ['tenant-a', 'ws-1', 1],
      ['tenant-b', 'ws-1', 1],
    ]);
    const lists = seen([
      (await tw.listWorkstreams({ tenantId: A.tenantId, principal: A.principal })).items,
      (await tw.listWorkstreams({ tenantId: B.tenantId, principal: B.principal })).items,
    ]);
    expect(lists.map((items) => items.map((w) => [w.tenantId, w.workstreamId, w.incarnation]))).toEqual([
      [['tenant-a', 'ws-1', mine.incarnation]],
      [['tenant-b', 'ws-1', theirs.incarnation]],
    ]);
    expect((await store.getWorkstream(workstreamKey('tenant-b', 'ws-1')))?.tenantId).toBe('tenant-b');

    // B closes and deletes its ws-1; A's goes on. The refusals name the id as B gave it.
    await tw.close(B);
    const closed = seen(await refusal(tw.send({ ...B, content: 'after the close' })));
    expect([closed.code, closed.message]).toEqual([ErrorCode.WORKSTREAM_CLOSED, 'workstream ws-1 is closed']);
    await tw.deleteWorkstream({ ...B, incarnation: theirs.incarnation });
    const gone = seen(await refusal(tw.getWorkstream(B)));
    expect(gone.code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect((await tw.status(A)).state).toBe('idle');
    const next = await tw.send({ ...A, content: 'still here' });
    expect((await within(next.done, 10_000, 'A’s next turn')).status).toBe('completed');
    expect(
      seen(await rt.history())
        .map((r) => r.message.content)
        .slice(-2),
    ).toEqual(['still here', 'echo: still here']);

    // Each tenant's feed told it of its own workstream's lifecycle, by the id it gave.
    seen(feeds);
    expect(feeds.a).toEqual([]);
    expect(feeds.b.map((e) => [e.type, e.tenantId, e.workstreamId, e.reason])).toEqual([
      ['ws_created', 'tenant-b', 'ws-1', undefined],
      ['ws_closed', 'tenant-b', 'ws-1', 'closed'],
      ['ws_closed', 'tenant-b', 'ws-1', 'deleted'],
    ]);

    // Nothing answered, emitted or thrown carried a key: every string that names one, by path.
    const keys: string[] = [];
    const walk = (value: unknown, path: string): void => {
      if (typeof value === 'string') {
        if (/tenant-[ab]\/ws-1/.test(value)) keys.push(`${path}: ${value}`);
      } else if (value instanceof Error) {
        walk({ message: value.message, details: (value as { details?: unknown }).details }, path);
      } else if (typeof value === 'object' && value !== null) {
        for (const [k, v] of Object.entries(value)) walk(v, `${path}.${k}`);
      }
    };
    walk(outputs, 'outputs');
    expect(keys).toEqual([]);
    expect(JSON.stringify(outputs)).toContain('"workstreamId":"ws-1"');
  });

  it('T2: an error raised inside with the key — the journal’s, in status() and in its persistence event — names the caller’s id', async () => {
    const faulty = faultyStore();
    rt = await startRuntime({
      store: faulty.store,
      journal: { retryBaseMs: 600_000, retryMaxMs: 600_000, sweepMs: 600_000 },
    });
    const key = workstreamKey(A.tenantId, A.workstreamId);
    faulty.rejectWith(
      1,
      assistantRow,
      () =>
        new TurnwardenError(ErrorCode.STORE_ERROR, `injected: the append to ${key} failed`, {
          retryable: true,
          details: { workstreamId: key },
        }),
    );
    const retrying = nextEvent(rt.tw, A.workstreamId, 'persistence');
    const turn = await rt.tw.send({ ...A, content: script({ text: 'kept' }) });
    const reported = (await within(retrying, 10_000, 'the journal reports retrying'))
      .data as PersistenceStatus;
    const status = (await rt.tw.status(A)).persistence;
    for (const error of [reported.error, status.error]) {
      expect([error?.message, error?.details]).toEqual([
        'injected: the append to ws-1 failed',
        { workstreamId: 'ws-1' },
      ]);
    }
    // The sweep writes it; the turn completes.
    testControls(rt.tw).sweepJournal();
    expect((await within(turn.done, 10_000, 'the turn')).status).toBe('completed');
  });
});
