/**
 * A shared model thread (the `shared` model placement): it runs the model calls of every
 * session's turns, where the JIT stays warm and connections are pooled, while each session's
 * worker sleeps until its call is complete. Commands and events travel on the thread's parent
 * port (one port: a call's tokens always precede its result).
 *
 * - **A call** (`run`): the context is read from the store through the thread's own read-only
 *   view (or comes with the command where the store has none), the provider streams, and every
 *   event stamps the turn's clock slot — only while the slot is armed for the call's generation,
 *   so a call that outlives its turn never stamps the next one. A stamp that finds the slot
 *   fenced (the turn's abort committed) aborts the call at once; the supervisor's `abort`
 *   reaches its request the same way (the provider's `signal`). Text is sent to the supervisor
 *   in batches (`flushMs`); the result follows the call's last tokens.
 * - **Liveness**: the thread stamps its own slot every `beatMs`. A thread whose loop is stuck
 *   (a provider spinning) stops stamping; the supervisor terminates it, fails its calls and
 *   starts another.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Activity, SlotStamp } from '@turnwarden/clock';
import type {
  HistoryMessage,
  HistoryReaderSpec,
  HistoryRow,
  ModelThreadCommand,
  ModelThreadEvent,
  ModelThreadInit,
} from '@turnwarden/protocol';
import { errors, toWire } from '@turnwarden/protocol';
import type { ModelProvider } from './contracts.js';
import { asModelError } from './model-error.js';
import { lowerThreadPriority, osThreadId } from './priority.js';
import { loadRegistry, type Registry } from './registry.js';
import { streamAssistant } from './stream.js';

interface HistoryReader {
  readHistory(workstreamId: string): Promise<HistoryRow[]>;
  close(): Promise<void>;
}

const init = workerData as ModelThreadInit;
const port = parentPort!;
const post = (event: ModelThreadEvent) => port.postMessage(event);

// A provider that spins must not take the watchdog's CPU either (L12): the same priority as a session worker's.
if (init.nice) lowerThreadPriority(init.nice);
const own = new SlotStamp(init.clock, init.slot);
const beat = setInterval(() => own.touch(Activity.threadBeat), init.beatMs);
beat.unref();

let registry: Registry;
try {
  registry = await loadRegistry(init.pluginModules);
} catch (e) {
  post({ t: 'fatal', error: toWire(e) });
  throw e;
}

// ── the store's read-only view ────────────────────────────────────────────────
let readerSpec: HistoryReaderSpec | undefined = init.reader;
let reader: Promise<HistoryReader> | undefined;
async function context(workstreamId: string): Promise<HistoryRow[]> {
  if (readerSpec === undefined) throw errors.internal('this model thread has no view of the store');
  const spec = readerSpec;
  reader ??= import(spec.module).then((m: { openHistoryReader(o: unknown): Promise<HistoryReader> }) =>
    m.openHistoryReader(spec.options),
  );
  reader.catch(() => {
    reader = undefined; // opened again on the next call
  });
  return (await reader).readHistory(workstreamId);
}

// ── tokens, in batches ────────────────────────────────────────────────────────
let pending: (number | string)[] = [];
let flushTimer: NodeJS.Timeout | NodeJS.Immediate | undefined;
const flush = () => {
  if (flushTimer !== undefined) {
    if (init.flushMs > 0) clearTimeout(flushTimer as NodeJS.Timeout);
    else clearImmediate(flushTimer as NodeJS.Immediate);
    flushTimer = undefined;
  }
  if (pending.length === 0) return;
  const items = pending;
  pending = [];
  post({ t: 'tokens', items });
};
const queueText = (id: number, text: string) => {
  pending.push(id, text);
  if (flushTimer === undefined) {
    flushTimer = init.flushMs > 0 ? setTimeout(flush, init.flushMs) : setImmediate(flush);
  }
};

// ── calls ─────────────────────────────────────────────────────────────────────
const calls = new Map<number, AbortController>();

async function run(cmd: Extract<ModelThreadCommand, { t: 'run' }>): Promise<void> {
  const { id, generation } = cmd;
  const abort = new AbortController();
  calls.set(id, abort);
  const slot = new SlotStamp(init.clock, cmd.slot);
  // Stamps the turn's slot while it is armed for this call's generation; a stamp that finds the
  // turn's abort committed ends the call.
  const stamp = (code: number) => {
    if (abort.signal.aborted) return;
    if (slot.generation() !== (generation | 0)) {
      abort.abort(errors.turnAborted('turn aborted: its turn has ended'));
    } else if (!slot.touch(code)) {
      abort.abort(errors.turnAborted('turn aborted: abort committed'));
    }
  };
  try {
    const model: ModelProvider | undefined = registry.models.get(cmd.model);
    if (model === undefined) throw errors.invalidInput(`unknown model provider: ${cmd.model}`);
    let history: readonly HistoryMessage[];
    if (cmd.history !== undefined) history = cmd.history;
    else {
      const rows = await context(cmd.workstreamId);
      if (abort.signal.aborted) throw abort.signal.reason;
      history = rows.map((r) => r.message);
    }
    const result = await streamAssistant(
      model,
      { history, tools: cmd.tools },
      { signal: abort.signal, heartbeat: () => stamp(Activity.modelHeartbeat) },
      {
        onText: (text) => {
          stamp(Activity.streamToken);
          queueText(id, text);
        },
        onToolCall: () => stamp(Activity.streamToken),
      },
    );
    flush(); // the call's tokens go before its result
    post({ t: 'done', id, result: { content: result.content, calls: result.calls } });
  } catch (e) {
    flush();
    post({ t: 'failed', id, error: toWire(asModelError(e)) });
  } finally {
    calls.delete(id);
  }
}

async function check(cmd: Extract<ModelThreadCommand, { t: 'check' }>): Promise<void> {
  try {
    registry.models.get(cmd.model)?.checkInput?.(cmd.content);
    post({ t: 'checked', id: cmd.id });
  } catch (e) {
    post({ t: 'checked', id: cmd.id, error: toWire(e) });
  }
}

port.on('message', (cmd: ModelThreadCommand) => {
  switch (cmd.t) {
    case 'run':
      void run(cmd);
      return;
    case 'abort': {
      const call = calls.get(cmd.id);
      if (call !== undefined && !call.signal.aborted) {
        call.abort(errors.turnAborted(`turn aborted: ${cmd.reason}`));
      }
      return;
    }
    case 'check':
      void check(cmd);
      return;
    case 'reader':
      readerSpec = cmd.reader;
      return;
  }
});

own.touch(Activity.threadBeat);
const tid = osThreadId();
post({
  t: 'ready',
  models: [...registry.models.keys()],
  checks: [...registry.models.values()].filter((m) => typeof m.checkInput === 'function').map((m) => m.name),
  toolModules: registry.toolModules,
  ...(tid === undefined ? {} : { tid }),
});
