/** Configuration, input and failure paths of the embedded API. */
import { ErrorCode, isTurnwardenError, openToolCalls, type TurnwardenError } from '@turnwarden/protocol';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Turnwarden } from './index.js';
import { within } from './test-support/bounded.js';
import { nextEvent, SCRIPTED, script, startRuntime } from './test-support/runtime.js';
import { resolveConfig } from './testing.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

async function refusal(p: Promise<unknown>) {
  try {
    await p;
  } catch (e) {
    if (isTurnwardenError(e)) return e;
    throw e;
  }
  throw new Error('expected a refusal');
}

describe('configuration', () => {
  it.each([
    [{ watchdog: { timeoutMs: -1 } }, 'watchdog.timeoutMs'],
    [{ watchdog: { pollMs: 5_000, timeoutMs: 1_000 } }, 'watchdog.pollMs'],
    [{ watchdog: { graceMs: 1.5 } }, 'watchdog.graceMs'],
    [{ lease: { ttlMs: 1_000, renewMs: 2_000 } }, 'lease.renewMs'],
    [{ pool: { maxWorkers: 0 } }, 'pool.maxWorkers'],
    [{ pool: { maxWorkers: 2, warmWorkers: 3 } }, 'pool.warmWorkers'],
    [{ watchdog: { timeoutMS: 100 } }, 'watchdog.timeoutMS'],
    [{ limits: { maxToolArgBytes: 'big' } }, 'limits.maxToolArgBytes'],
    [{ pluginModules: [42] }, 'pluginModules'],
    [{ hostId: 'a:b' }, 'hostId'],
    [{ hostId: '' }, 'hostId'],
  ])('refuses %j with an INVALID_CONFIG error naming %s', (input, field) => {
    let caught: unknown;
    try {
      resolveConfig({ model: 'scripted', ...input });
    } catch (e) {
      caught = e;
    }
    expect(isTurnwardenError(caught, ErrorCode.INVALID_CONFIG)).toBe(true);
    expect((caught as Error).message.startsWith(`${field} `)).toBe(true);
  });

  it('T5: model has no default: a configuration without one is refused naming model', () => {
    let caught: unknown;
    try {
      resolveConfig({ pluginModules: [SCRIPTED] });
    } catch (e) {
      caught = e;
    }
    expect(isTurnwardenError(caught, ErrorCode.INVALID_CONFIG)).toBe(true);
    expect((caught as TurnwardenError).details).toEqual({ field: 'model' });
    expect((caught as Error).message).toMatch(/^model is required/);
  });

  it('start() refuses a plugin module that does not resolve, naming the field', async () => {
    const e = await refusal(
      Turnwarden.start({
        model: 'scripted',
        pluginModules: [new URL('./no-such-plugin.mjs', import.meta.url).href],
      }),
    );
    expect(e.code).toBe(ErrorCode.INVALID_CONFIG);
    expect(e.message).toMatch(/^pluginModules\[0\] names a file that does not exist/);
    const bare = await refusal(
      Turnwarden.start({ model: 'scripted', pluginModules: ['no-such-package-turnwarden'] }),
    );
    expect(bare.message).toMatch(/^pluginModules\[0\] cannot be resolved/);
  });

  it('start() fails with a typed error, instead of respawning forever, when workers cannot start', async () => {
    const logs: string[] = [];
    const e = await refusal(
      Turnwarden.start({
        model: 'scripted',
        pluginModules: [new URL('./test-support/exiting-plugin.mjs', import.meta.url).href],
        pool: { maxWorkers: 2, warmWorkers: 2 },
        logger: pino({ level: 'error' }, { write: (s: string) => void logs.push(JSON.parse(s).msg) }),
      }),
    );
    expect(e.code).toBe(ErrorCode.WORKER_EXITED);
    expect(e.message).toMatch(/session workers fail to start/);
  });

  it('T5: plugin modules that throw, export nothing usable or reuse a tool name, and unknown models, are refused at start with INVALID_CONFIG naming the field', async () => {
    const plugin = (name: string) => new URL(`./test-support/${name}`, import.meta.url).href;
    const cases: [Partial<Parameters<typeof Turnwarden.start>[0]>, string, RegExp][] = [
      [
        { pluginModules: [plugin('broken-plugin.mjs')] },
        'pluginModules[0]',
        /failed to load: this plugin is broken/,
      ],
      [
        { pluginModules: [plugin('empty-plugin.mjs')] },
        'pluginModules[0]',
        /exports neither a tools nor a models array/,
      ],
      [
        { pluginModules: [SCRIPTED, plugin('duplicate-tool-plugin.mjs')] },
        'pluginModules[1]',
        /a second tool named echo/,
      ],
      [
        { model: 'no-such-model', pluginModules: [SCRIPTED] },
        'model',
        /model no-such-model is not provided by pluginModules \(available: scripted\)/,
      ],
      // Nothing is built in: without the scripted plugin there is no scripted model.
      [
        { model: 'scripted', pluginModules: [] },
        'model',
        /not provided by pluginModules \(available: none\)/,
      ],
      // With no warm worker, a probe worker checks the same at start, not at the first turn.
      [{ model: 'no-such-model', pool: { warmWorkers: 0 } }, 'model', /not provided/],
      [
        { pluginModules: [plugin('empty-plugin.mjs')], pool: { warmWorkers: 0 } },
        'pluginModules[0]',
        /neither/,
      ],
    ];
    for (const [options, field, message] of cases) {
      const e = await refusal(
        Turnwarden.start({ model: 'scripted', ...options, pool: { maxWorkers: 2, ...options?.pool } }),
      );
      expect([field, e.code, e.details]).toEqual([field, ErrorCode.INVALID_CONFIG, { field }]);
      expect(e.message).toMatch(message);
    }
    // A model a plugin provides is accepted by name.
    const tw = await Turnwarden.start({
      model: 'tiny',
      pluginModules: [plugin('model-plugin.mjs')],
      pool: { maxWorkers: 1 },
    });
    expect(tw.config.model).toBe('tiny');
    await tw.shutdown();
  });

  it('start() refuses a bad configuration before anything starts', async () => {
    const e = await refusal(Turnwarden.start({ model: 'scripted', watchdog: { timeoutMs: 0 } }));
    expect(e.code).toBe(ErrorCode.INVALID_CONFIG);
    expect(e.details).toEqual({ field: 'watchdog.timeoutMs' });
  });
});

describe('models and tools are the host’s choice', () => {
  const reporter = new URL('./test-support/reporter-plugin.mjs', import.meta.url).href;

  it('nothing is built in: a host’s model is offered exactly its plugins’ tools, and the scripted plugin adds its own only when loaded', async () => {
    const answer = async (pluginModules: string[]) => {
      const tw = await Turnwarden.start({
        model: 'reporter',
        pluginModules,
        pool: { maxWorkers: 1, warmWorkers: 1 },
      });
      try {
        await tw.createWorkstream({ tenantId: 't', principal: 'user', workstreamId: 'ws' });
        const turn = await tw.send({
          tenantId: 't',
          principal: 'user',
          workstreamId: 'ws',
          content: 'which tools?',
        });
        expect((await turn.done).status).toBe('completed');
        const rows = (await tw.history({ tenantId: 't', principal: 'user', workstreamId: 'ws' })).rows;
        return rows.at(-1)?.message.content;
      } finally {
        await tw.shutdown();
      }
    };
    expect(await answer([reporter])).toBe('tools: lookup');
    expect(await answer([reporter, SCRIPTED])).toBe('tools: lookup,sleep,heartbeat,wedge,echo,fail,transfer');
  });

  it('T5: a model’s checkInput refuses a message with its typed error before the claim, and nothing is written', async () => {
    const tw = await Turnwarden.start({
      model: 'reporter',
      pluginModules: [reporter],
      pool: { maxWorkers: 1, warmWorkers: 1 },
    });
    try {
      await tw.createWorkstream({ tenantId: 't', principal: 'user', workstreamId: 'ws' });
      const e = await refusal(
        tw.send({ tenantId: 't', principal: 'user', workstreamId: 'ws', content: 'forbidden' }),
      );
      expect([e.code, e.message, e.details]).toEqual([
        ErrorCode.INVALID_INPUT,
        'reporter refuses this message',
        { field: 'content' },
      ]);
      expect((await tw.history({ tenantId: 't', principal: 'user', workstreamId: 'ws' })).rows).toEqual([]);
      expect((await tw.status({ tenantId: 't', principal: 'user', workstreamId: 'ws' })).state).toBe('idle');
      // The worker the check ran on went back to the pool: the next send runs.
      const turn = await tw.send({ tenantId: 't', principal: 'user', workstreamId: 'ws', content: 'fine' });
      expect((await turn.done).status).toBe('completed');
    } finally {
      await tw.shutdown();
    }
  });
});

describe('input', () => {
  it('T5: a malformed script is refused with INVALID_SCRIPT naming the step, and nothing is written', async () => {
    rt = await startRuntime();
    const e = await refusal(rt.send(JSON.stringify({ script: [{ text: 'ok' }, { heartbeat: -5 }] })));
    expect(e.code).toBe(ErrorCode.INVALID_SCRIPT);
    expect(e.message).toMatch(/script\[1\]\.heartbeat/);
    expect(await rt.history()).toEqual([]);
    const e2 = await refusal(rt.send(JSON.stringify({ script: [{ dance: true }] })));
    expect(e2.code).toBe(ErrorCode.INVALID_SCRIPT);
    expect(await rt.history()).toEqual([]);
  });

  it('T5: oversize content, unknown fields and invalid ids are refused with nothing written', async () => {
    rt = await startRuntime({ limits: { maxMessageBytes: 64 } });
    expect((await refusal(rt.send('x'.repeat(65)))).code).toBe(ErrorCode.INVALID_INPUT);
    // The limit is in UTF-8 bytes: 22 three-byte characters are 66 bytes.
    const wide = await refusal(rt.send('€'.repeat(22)));
    expect(wide.code).toBe(ErrorCode.INVALID_INPUT);
    expect(wide.message).toBe('content exceeds 64 bytes');
    const extra = {
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: rt.workstreamId,
      content: 'hi',
      admin: true,
    };
    expect((await refusal(rt.tw.send(extra as never))).code).toBe(ErrorCode.INVALID_INPUT);
    expect(
      (
        await refusal(
          rt.tw.send({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: '../etc', content: 'hi' }),
        )
      ).code,
    ).toBe(ErrorCode.INVALID_INPUT);
    expect(await rt.history()).toEqual([]);
    // Exactly at the limit is accepted.
    expect((await (await rt.send('€'.repeat(21))).done).status).toBe('completed');
  });

  it('T5: every call takes one object with known fields only; bad input is refused before anything is read or written', async () => {
    rt = await startRuntime({ limits: { maxMessageBytes: 64 } });
    await (await rt.send(script({ text: 'first' }))).done;
    const before = await rt.history();
    const created = await rt.tw.stats();
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    const tw = rt.tw as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
    const cases: [string, unknown[], string][] = [
      [
        'createWorkstream',
        [{ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-new', owner: 'x' }],
        'owner',
      ],
      ['createWorkstream', ['tenant-a'], 'input'],
      ['send', [{ ...ref, content: '   \n' }], 'content'],
      ['send', ['tenant-a', rt.workstreamId, 'hi'], 'input'],
      ['history', ['tenant-a', rt.workstreamId], 'input'],
      ['history', [{ ...ref, since: 3 }], 'since'],
      ['status', [{ ...ref, verbose: true }], 'verbose'],
      ['cancel', [{ ...ref, force: true }], 'force'],
      ['close', [{ tenantId: 'tenant-a', principal: 'user-a' }], 'workstreamId'],
      ['compact', [{ ...ref, throughSeq: 0, summary: 's' }], 'throughSeq'],
      ['compact', [{ ...ref, throughSeq: 1, summary: ' ' }], 'summary'],
      ['subscribe', [{ ...ref, listener: 'not a function' }], 'listener'],
      ['subscribe', [ref, () => {}], 'listener'],
    ];
    for (const [call, args, field] of cases) {
      const e = await refusal(tw[call]!.apply(rt.tw, args));
      expect([call, field, e.code, e.details]).toEqual([call, field, ErrorCode.INVALID_INPUT, { field }]);
    }
    // Nothing was written: the history, the workstream list and the turn count are as before.
    expect(await rt.history()).toEqual(before);
    expect(
      (await refusal(rt.tw.status({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-new' })))
        .code,
    ).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect(rt.tw.stats().turnsStarted).toBe(created.turnsStarted);
  });

  it('T5: a send whose signal is already aborted is refused with TURN_ABORTED and writes nothing', async () => {
    rt = await startRuntime();
    const controller = new AbortController();
    controller.abort();
    const e = await refusal(
      rt.tw.send({
        tenantId: 'tenant-a',
        principal: 'user-a',
        workstreamId: rt.workstreamId,
        content: 'hi',
        signal: controller.signal,
      }),
    );
    expect(e.code).toBe(ErrorCode.TURN_ABORTED);
    expect(await rt.history()).toEqual([]);
    expect(rt.tw.stats().turnsStarted).toBe(0);
  });

  it('C3: aborting a send’s signal, or the handle’s cancel(), force-cancels that turn and resolves once idle', async () => {
    rt = await startRuntime();
    const controller = new AbortController();
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    const started = nextEvent(rt.tw, rt.workstreamId, 'turn_started');
    const viaSignal = await rt.tw.send({
      ...ref,
      content: script({ heartbeat: 60_000, everyMs: 50 }),
      signal: controller.signal,
    });
    await started;
    controller.abort();
    const first = await within(viaSignal.done, 10_000, 'the aborted signal cancels the turn');
    expect([first.status, first.abortReason]).toEqual(['interrupted', 'cancel']);
    const inTool = nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    const viaHandle = await rt.send(script({ tools: [{ name: 'sleep', args: { ms: 60_000 } }] }));
    await inTool;
    const second = await within(viaHandle.cancel(), 10_000, 'cancel() ends the turn');
    expect([second.status, second.abortReason, second.synthesized]).toEqual(['interrupted', 'cancel', 1]);
    expect((await rt.tw.status(ref)).state).toBe('idle');
    // cancel() of a turn that ended is a no-op returning its result; it never touches a later turn.
    const third = await rt.send(script({ sleep: 200 }, { text: 'third' }));
    expect(await viaHandle.cancel()).toEqual(second);
    controller.abort(); // already aborted: nothing more happens
    expect((await third.done).status).toBe('completed');
  });

  it('Symbol.asyncDispose shuts the runtime down; the default logger prints nothing; a bad logLevel is INVALID_CONFIG', async () => {
    const written: string[] = [];
    const write = process.stderr.write;
    process.stderr.write = ((chunk: string) => {
      written.push(String(chunk));
      return true;
    }) as typeof process.stderr.write;
    let tw: Turnwarden | undefined;
    try {
      tw = await Turnwarden.start({
        model: 'scripted',
        pluginModules: [SCRIPTED],
        pool: { maxWorkers: 1, warmWorkers: 1 },
      });
      await tw[Symbol.asyncDispose]();
    } finally {
      process.stderr.write = write;
    }
    expect(written.join('')).toBe('');
    expect((await refusal(tw!.createWorkstream({ tenantId: 't', principal: 'user' }))).code).toBe(
      ErrorCode.SHUTTING_DOWN,
    );
    const e = await refusal(Turnwarden.start({ model: 'scripted', logLevel: 'loud' as never }));
    expect([e.code, e.details]).toEqual([ErrorCode.INVALID_CONFIG, { field: 'logLevel' }]);
    // Seams are not options: a host passing one gets INVALID_CONFIG naming it.
    const seam = await refusal(Turnwarden.start({ manualWatchdog: true } as never));
    expect([seam.code, seam.details]).toEqual([ErrorCode.INVALID_CONFIG, { field: 'config.manualWatchdog' }]);
  });

  it('T2: another tenant cannot see or act on a workstream (not found, no existence leak)', async () => {
    rt = await startRuntime();
    await (await rt.send(script({ tools: [{ name: 'echo', args: { text: 'secret' } }] }, { text: 'ok' })))
      .done;
    const heard: unknown[] = [];
    const ws = rt.workstreamId;
    const calls: [string, (id: string) => Promise<unknown>][] = [
      [
        'send',
        (id) => rt!.tw.send({ tenantId: 'tenant-b', principal: 'user-b', workstreamId: id, content: 'hi' }),
      ],
      ['history', (id) => rt!.tw.history({ tenantId: 'tenant-b', principal: 'user-b', workstreamId: id })],
      ['status', (id) => rt!.tw.status({ tenantId: 'tenant-b', principal: 'user-b', workstreamId: id })],
      ['cancel', (id) => rt!.tw.cancel({ tenantId: 'tenant-b', principal: 'user-b', workstreamId: id })],
      ['close', (id) => rt!.tw.close({ tenantId: 'tenant-b', principal: 'user-b', workstreamId: id })],
      [
        'compact',
        (id) =>
          rt!.tw.compact({
            tenantId: 'tenant-b',
            principal: 'user-b',
            workstreamId: id,
            throughSeq: 2,
            summary: 'stolen',
          }),
      ],
      [
        'subscribe',
        (id) =>
          rt!.tw.subscribe({
            tenantId: 'tenant-b',
            principal: 'user-b',
            workstreamId: id,
            listener: (e) => heard.push(e),
          }),
      ],
    ];
    for (const [name, call] of calls) {
      const e = await refusal(call(ws));
      expect([name, e.code]).toEqual([name, ErrorCode.WORKSTREAM_NOT_FOUND]);
      // Word for word what an id that does not exist at all gets.
      const missing = await refusal(call('ws-none'));
      expect(e.message.replace(ws, 'ID')).toBe(missing.message.replace('ws-none', 'ID'));
    }
    // Nothing changed, and the refused subscriber heard nothing of the next turn.
    await (await rt.send('still mine')).done;
    expect(heard).toEqual([]);
    expect((await rt.tw.status({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: ws })).state).toBe(
      'idle',
    );
    const rows = await rt.history();
    expect(rows.filter((r) => r.message.role === 'system')).toEqual([]);
    expect(rows.map((r) => r.message.role)).toEqual([
      'user',
      'assistant',
      'tool',
      'assistant',
      'user',
      'assistant',
    ]);
  });

  it('T6: malformed tool arguments and unknown tools become complete tool errors with effect none', async () => {
    rt = await startRuntime();
    const result = await (
      await rt.send(
        script(
          {
            tools: [
              { name: 'echo', args: '{"text": ', id: 'dup' },
              { name: 'no_such_tool', args: {}, id: 'dup' },
              { name: 'echo', args: { text: 'fine' }, id: 'dup' },
            ],
          },
          { text: 'after tools' },
        ),
      )
    ).done;
    expect(result).toMatchObject({ status: 'completed', finalText: 'after tools' });
    const tools = (await rt.history()).filter((r) => r.message.role === 'tool').map((r) => r.message);
    expect(tools).toEqual([
      expect.objectContaining({
        callIndex: 0,
        isError: true,
        effect: 'none',
        content: expect.stringMatching(/malformed/),
      }),
      expect.objectContaining({
        callIndex: 1,
        isError: true,
        effect: 'none',
        content: 'unknown tool: no_such_tool',
      }),
      expect.objectContaining({ callIndex: 2, isError: false, effect: 'applied', content: 'fine' }),
    ]);
  });

  it('T6 T5: a send’s tool allow-list: only those tools run, any other call is an unknown tool; an unregistered name is refused', async () => {
    rt = await startRuntime();
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    const content = script(
      {
        tools: [
          { name: 'echo', args: { text: 'allowed' } },
          { name: 'sleep', args: { ms: 1 } },
        ],
      },
      { text: 'done' },
    );
    const result = await (await rt.tw.send({ ...ref, content, tools: ['echo'] })).done;
    expect(result.status).toBe('completed');
    const tools = (await rt.history()).filter((r) => r.message.role === 'tool').map((r) => r.message);
    expect(tools).toEqual([
      expect.objectContaining({ callIndex: 0, isError: false, effect: 'applied', content: 'allowed' }),
      expect.objectContaining({
        callIndex: 1,
        isError: true,
        effect: 'none',
        content: 'unknown tool: sleep',
      }),
    ]);
    // Without a list every registered tool runs.
    await (await rt.tw.send({ ...ref, content })).done;
    const last = (await rt.history()).filter((r) => r.message.role === 'tool').at(-1)!.message;
    expect(last).toMatchObject({ callIndex: 1, isError: false, effect: 'applied' });
    const rows = (await rt.history()).length;
    for (const bad of [['no_such_tool'], ['echo', 'echo'], [''], 'echo']) {
      const e = await refusal(rt.tw.send({ ...ref, content: 'hi', tools: bad as never }));
      expect([bad, e.code, e.details]).toEqual([bad, ErrorCode.INVALID_INPUT, { field: 'tools' }]);
    }
    expect((await rt.history()).length).toBe(rows);
  });

  it('T3: a message from another principal into an in-flight turn is refused, with a retryable TURN_IN_PROGRESS', async () => {
    rt = await startRuntime();
    const turn = await rt.tw.send({
      tenantId: 'tenant-a',
      workstreamId: rt.workstreamId,
      content: script({ heartbeat: 200 }, { text: 'ok' }),
      principal: 'alice',
    });
    const rowsBefore = (await rt.history()).length;
    const e = await refusal(
      rt.tw.send({
        tenantId: 'tenant-a',
        workstreamId: rt.workstreamId,
        content: 'interjection',
        principal: 'mallory',
      }),
    );
    expect(e.code).toBe(ErrorCode.TURN_IN_PROGRESS);
    expect(e.retryable).toBe(true);
    expect((await refusal(rt.send('me again'))).code).toBe(ErrorCode.TURN_IN_PROGRESS);
    expect(await rt.history()).toHaveLength(rowsBefore);
    expect((await turn.done).status).toBe('completed');
  });
});

describe('worker death', () => {
  it('T7: a worker killed mid-call rejects the pending call with a typed error; history is completed and the next turn runs', async () => {
    rt = await startRuntime();
    const started = nextEvent(rt.tw, rt.workstreamId, 'turn_started');
    const result = await (await rt.send(script({ tools: [{ name: 'exit', args: { code: 3 } }] }))).done;
    expect(result.status).toBe('failed');
    expect(result.abortReason).toBe('crash');
    expect(result.error?.code).toBe(ErrorCode.WORKER_EXITED);
    expect(result.workerTerminated).toBe(true);
    expect(openToolCalls(await rt.history())).toEqual([]);
    expect(rt.logged('session worker died mid-turn')).toHaveLength(1);
    const first = (await started).data.workerId;
    const again = nextEvent(rt.tw, rt.workstreamId, 'turn_started');
    expect((await (await rt.send('still here?')).done).status).toBe('completed');
    expect((await again).data.workerId).not.toBe(first);
  });

  it('T7: a worker that exceeds its memory limit is treated like a crash and the workstream recovers', async () => {
    // A long watchdog timeout: only the heap limit may end this turn, however slow GC gets under load.
    rt = await startRuntime({
      watchdog: { timeoutMs: 60_000, pollMs: 1_000, graceMs: 1_000 },
      lease: { ttlMs: 10_000, renewMs: 1_000 },
      pool: { maxWorkers: 2, warmWorkers: 1, maxOldGenerationSizeMb: 32 },
    });
    const result = await (await rt.send(script({ tools: [{ name: 'allocate', args: {} }] }))).done;
    expect(result).toMatchObject({ status: 'failed', abortReason: 'crash' });
    const tools = (await rt.history()).filter((r) => r.message.role === 'tool').map((r) => r.message);
    expect(tools).toEqual([expect.objectContaining({ effect: 'unknown', synthesized: true })]);
    expect((await (await rt.send('recovered?')).done).status).toBe('completed');
  });

  it('shutdown aborts running turns, completes their history and settles every pending turn', async () => {
    rt = await startRuntime();
    const turn = await rt.send(
      script({ tools: [{ name: 'sleep', args: { ms: 60_000, ignoreAbort: true } }] }),
    );
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    const tw = rt.tw;
    let turnSettled = false;
    void turn.done.then(() => {
      turnSettled = true;
    });
    // A second, concurrent shutdown waits for the same complete shutdown.
    await Promise.race([tw.shutdown(), tw.shutdown()]);
    expect(turnSettled).toBe(true);
    expect(tw.stats().activeTurns).toBe(0);
    expect(await turn.done).toMatchObject({ status: 'interrupted', abortReason: 'shutdown' });
    rt = undefined;
    expect(
      (
        await refusal(
          tw.send({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1', content: 'x' }),
        )
      ).code,
    ).toBe(ErrorCode.SHUTTING_DOWN);
  });
});

describe('nothing waits forever', () => {
  it('a worker that never becomes ready (a plugin import that hangs) fails start() with TIMEOUT', async () => {
    const started = performance.now();
    const e = await refusal(
      Turnwarden.start({
        model: 'scripted',
        pluginModules: [new URL('./test-support/hanging-plugin.mjs', import.meta.url).href],
        pool: { maxWorkers: 1, warmWorkers: 1, startTimeoutMs: 300 },
        logger: pino({ level: 'silent' }),
      }),
    );
    expect(e.code).toBe(ErrorCode.TIMEOUT);
    expect((e.cause as Error).message).toMatch(/did not become ready within 300 ms/);
    expect(performance.now() - started).toBeLessThan(10_000);
  });

  it('shutdown settles a claim in flight: it is refused or its turn ends, and shutdown returns', async () => {
    // No warm worker: the claim waits for a spawn when shutdown begins.
    rt = await startRuntime({ pool: { maxWorkers: 2, warmWorkers: 0 } });
    const tw = rt.tw;
    const claim = tw.send({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: rt.workstreamId,
      content: 'hi',
    });
    const shutdown = tw.shutdown();
    const outcome = await within(
      claim.then(
        (t) => t.done.then((r) => r.status),
        (err: unknown) => (isTurnwardenError(err) ? err.code : String(err)),
      ),
      10_000,
      'the claim in flight settles',
    );
    await within(shutdown, 10_000, 'shutdown returns');
    rt = undefined;
    expect(['SHUTTING_DOWN', 'interrupted', 'completed']).toContain(outcome);
    expect(tw.stats().activeTurns).toBe(0);
  });
});
