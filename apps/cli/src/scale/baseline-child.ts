/**
 * The scale bench's in-process baseline, forked by run.ts with --expose-gc: the same N turns as
 * plain async functions on one thread — what a user of an in-process agent library gets. Each
 * turn: `tokens` tokens delivered to a listener callback (scripted: token k due `k × delayMs`
 * after the first, as the scripted model paces them; http: a bare `fetch` of the loopback server's
 * SSE stream, a TextDecoder, a split on blank lines and a JSON.parse per chunk), the heartbeat
 * tool (`toolMs`, a beat every `heartbeatMs`, as the demo tool does), then `tokens` more; the
 * same rows as the runtime journals (user message, assistant with the tool call, tool result,
 * final assistant) written to better-sqlite3 (a file in a temp dir, WAL, synchronous NORMAL as
 * the runtime's store). Reports one `RunReport` over IPC and exits.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { epochNow, reportToParent } from '../bench/child.js';
import { bounded, errorMessage, RssSampler, SessionTrack, settledRss, sleep, Window } from './measure.js';
import type { BaselineConfig, RunReport } from './types.js';
import { messageText, TOKEN_TEXT, toolArgs, turnScript, type Workload } from './workload.js';

interface Rows {
  append(workstream: string, role: string, content: string): void;
}

function openRows(file: string): { rows: Rows; close(): void; create(id: string): void } {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.exec(`CREATE TABLE workstreams (id TEXT PRIMARY KEY, next_seq INTEGER NOT NULL);
           CREATE TABLE messages (workstream TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,
                                  content TEXT NOT NULL, PRIMARY KEY (workstream, seq));`);
  const create = db.prepare('INSERT INTO workstreams (id, next_seq) VALUES (?, 1)');
  const next = db.prepare(
    'UPDATE workstreams SET next_seq = next_seq + 1 WHERE id = ? RETURNING next_seq - 1 AS seq',
  );
  const insert = db.prepare('INSERT INTO messages (workstream, seq, role, content) VALUES (?, ?, ?, ?)');
  const append = db.transaction((workstream: string, role: string, content: string) => {
    const { seq } = next.get(workstream) as { seq: number };
    insert.run(workstream, seq, role, content);
  });
  return {
    rows: { append: (w, r, c) => append(w, r, c) },
    create: (id) => create.run(id),
    close: () => db.close(),
  };
}

/** The demo heartbeat tool's loop: a beat at once, then one after every `everyMs` for `ms`. */
async function heartbeatTool(w: Workload, beat: () => void): Promise<string> {
  beat();
  let beats = 1;
  for (let remaining = w.toolMs; remaining > 0; remaining -= w.heartbeatMs) {
    await sleep(Math.min(w.heartbeatMs, remaining));
    beat();
    beats++;
  }
  return `ran ${w.toolMs} ms with ${beats} heartbeats`;
}

interface ModelCall {
  readonly text: string;
  readonly toolCall?: { readonly id: string; readonly name: string; readonly args: string };
}

type Model = (
  history: readonly Record<string, unknown>[],
  onToken: (text: string) => void,
) => Promise<ModelCall>;

/**
 * Tokens on a timer, paced as the scripted model paces them (token k due `k × delayMs` after the
 * first); the first call ends with the tool call.
 */
function timerModel(w: Workload): Model {
  return async (history, onToken) => {
    const start = performance.now();
    for (let k = 0; k < w.tokens; k++) {
      if (k > 0) await sleep(Math.max(0, start + k * w.delayMs - performance.now()));
      onToken(TOKEN_TEXT);
    }
    const first = !history.some((m) => m.role === 'assistant');
    return first
      ? {
          text: messageText(w),
          toolCall: { id: 'call_0_0', name: 'heartbeat', args: JSON.stringify(toolArgs(w)) },
        }
      : { text: messageText(w) };
  };
}

/** A bare fetch of the loopback server's chat-completions stream (it plays the same script). */
function httpModel(url: string): Model {
  return async (history, onToken) => {
    const res = await fetch(`${url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'loopback', stream: true, messages: history }),
    });
    if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
    const decoder = new TextDecoder();
    let buffered = '';
    let text = '';
    let id = '';
    let name = '';
    let args = '';
    for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffered += decoder.decode(bytes, { stream: true });
      let end = buffered.indexOf('\n\n');
      while (end >= 0) {
        const event = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        end = buffered.indexOf('\n\n');
        if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
        const chunk = JSON.parse(event.slice(6)) as {
          choices: {
            delta?: {
              content?: string;
              tool_calls?: { id?: string; function?: { name?: string; arguments?: string } }[];
            };
          }[];
        };
        const delta = chunk.choices[0]?.delta;
        if (delta?.content) {
          text += delta.content;
          onToken(delta.content);
        }
        for (const call of delta?.tool_calls ?? []) {
          id ||= call.id ?? '';
          name ||= call.function?.name ?? '';
          args += call.function?.arguments ?? '';
        }
      }
    }
    return name === '' ? { text } : { text, toolCall: { id, name, args } };
  };
}

/** One turn: the user row, model calls until one has no tool call, each tool run and its row. */
async function turn(
  id: string,
  content: string,
  w: Workload,
  model: Model,
  rows: Rows,
  onToken: (text: string) => void,
  beat: () => void,
  track: SessionTrack,
): Promise<void> {
  const history: Record<string, unknown>[] = [{ role: 'user', content }];
  rows.append(id, 'user', content);
  for (let step = 0; step < 8; step++) {
    const call = await model(history, onToken);
    const assistant: Record<string, unknown> = { role: 'assistant', content: call.text };
    if (call.toolCall) {
      assistant.tool_calls = [
        {
          id: call.toolCall.id,
          type: 'function',
          function: { name: call.toolCall.name, arguments: call.toolCall.args },
        },
      ];
    }
    history.push(assistant);
    rows.append(id, 'assistant', JSON.stringify(assistant));
    if (!call.toolCall) return;
    track.mark('toolStarted');
    const result = await heartbeatTool(w, beat);
    track.mark('toolFinished');
    const tool = { role: 'tool', tool_call_id: call.toolCall.id, content: result };
    history.push(tool);
    rows.append(id, 'tool', JSON.stringify(tool));
  }
  throw new Error('more than 8 model calls');
}

async function measure(cfg: BaselineConfig): Promise<RunReport> {
  const dir = mkdtempSync(join(tmpdir(), 'tw-scale-base-'));
  const errors: string[] = [];
  const db = openRows(join(dir, 'baseline.db'));
  try {
    const model = cfg.provider === 'http' ? httpModel(cfg.url ?? '(no url)') : timerModel(cfg.workload);
    const content = turnScript(cfg.workload);
    const rssBefore = await settledRss();
    const lifeStart = epochNow();
    const ids = Array.from({ length: cfg.n }, (_, i) => `base-${i}`);
    for (const id of ids) db.create(id);
    const sampler = new RssSampler(250);
    let window: Window | undefined;
    const t0 = () => window?.t0 ?? performance.now();
    const sessions = ids.map(() => new SessionTrack(t0));
    // Each session's last progress, stamped on every token and beat: the in-process activity clock.
    const activity = new Float64Array(cfg.n);
    try {
      window = new Window();
      const turns = ids.map((id, i) => {
        const s = sessions[i] as SessionTrack;
        const stamp = () => {
          activity[i] = performance.now();
        };
        const onToken = (text: string) => {
          stamp();
          s.token(text);
        };
        return turn(id, content, cfg.workload, model, db.rows, onToken, stamp, s).then(
          () => s.settle('completed'),
          (e: unknown) => {
            s.settle('failed');
            errors.push(errorMessage(e));
          },
        );
      });
      await bounded(Promise.all(turns), window.t0 + cfg.boundMs - performance.now());
      window.end();
    } finally {
      sampler.stop();
    }
    return { ...window.report(lifeStart, cfg.n, sessions, rssBefore, sampler, errors), watchdogFired: 0 };
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const cfg = JSON.parse(process.argv[2] ?? '{}') as BaselineConfig;
await reportToParent(() => measure(cfg));
// Turns past the bound would keep their timers going: they are counted, not waited for.
process.exit(0);
