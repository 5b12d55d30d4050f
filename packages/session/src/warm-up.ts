/**
 * A session worker warms itself up before it reports ready: it runs two synthetic turns through
 * its own machine — one asking a model elsewhere (the shared model threads' path), one streaming
 * a local provider (the session placement's path), each with a tool call, its heartbeat and its
 * journal writes — and a few calls over a loopback RPC channel. Nothing leaves the thread: the
 * journal, the events and the model are local fakes; no clock slot is stamped.
 *
 * Why: each worker is a V8 isolate of its own, which compiles the machine, the turn loop and the
 * RPC code the first time they run. Run on a turn's hot path, that first compilation made a
 * worker's first turn cost several times its later ones, and a burst of first turns — a host's
 * warm pool meeting a burst of sends — kept hundreds of threads runnable at once. A warm worker
 * in the pool is now warm in both senses; the cost moves to the spawn, off the hot path.
 */
import { MessageChannel } from 'node:worker_threads';
import type { JournalAck, JournalRequest, TurnRequest } from '@turnwarden/protocol';
import { client, serve } from '@turnwarden/protocol';
import type { ModelProvider, Tool } from './contracts.js';
import { newSession, offer } from './lifecycle.js';
import { type RemoteModel, runTurn } from './turn.js';

const WS = 'turnwarden-warm-up';
const TOOL = '__turnwarden_warm_up';

const tool: Tool = {
  name: TOOL,
  description: 'warm-up',
  async run(args, ctx) {
    ctx.heartbeat();
    return JSON.stringify(args);
  },
};

/** The answers of a warm-up turn: a tool call, then text. */
const answers = [
  { content: 'w', calls: [{ id: 'c1', name: TOOL, arguments: '{"x":1}' }] },
  { content: 'done', calls: [] },
] as const;

const local: ModelProvider = {
  name: 'warm-up',
  async *stream(req, ctx) {
    ctx.heartbeat();
    const answer = answers[req.history.filter((m) => m.role === 'assistant').length] ?? answers[1];
    yield { type: 'text', text: answer.content };
    for (const call of answer.calls) yield { type: 'tool_call', call };
  },
};

function remote(): RemoteModel {
  let step = 0;
  return { remote: async () => answers[step++] ?? answers[1] };
}

function request(generation: number): TurnRequest {
  const snapshot = offer(newSession(WS), { type: 'CLAIM', generation });
  if (snapshot === undefined) throw new Error('warm-up: the machine refused CLAIM');
  return {
    workstreamId: WS,
    tenantId: WS,
    generation,
    fencingToken: 1,
    history: [],
    input: { role: 'user', content: 'warm up' },
    model: 'warm-up',
    limits: { maxModelSteps: 4, maxToolArgBytes: 1024 },
    snapshot,
  };
}

/**
 * Runs the warm-up; resolves true once its turns completed. Never throws: a worker that cannot
 * warm up still serves (false).
 */
export async function warmUp(): Promise<boolean> {
  try {
    // The RPC path the turn's journal and model calls take, over a loopback channel.
    const { port1, port2 } = new MessageChannel();
    let seq = 0;
    serve(port1, { journal: async (_req: JournalRequest): Promise<JournalAck> => ({ seqs: [++seq] }) });
    const rpc = client<{ journal(req: JournalRequest): Promise<JournalAck> }>(
      port2,
      new Promise<never>(() => {}),
    );
    const journal = (req: JournalRequest) => rpc.journal(req);
    let completed = 0;
    const turns = 3;
    for (let generation = 1; generation <= turns; generation++) {
      const model = generation % 3 === 2 ? local : remote();
      const outcome = await runTurn(request(generation), {
        touch: () => true,
        journal,
        emit: () => {},
        model,
        tools: new Map([[TOOL, tool]]),
        abort: new AbortController(),
        abortReason: () => undefined,
      });
      if (outcome.status === 'completed' && outcome.modelSteps === 2) completed++;
    }
    port1.close();
    port2.close();
    return completed === turns;
  } catch {
    // Warming up is an optimisation: the first real turn compiles what this did not.
    return false;
  }
}
