/** Test helpers (excluded from the build). */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type AssistantMessage,
  isTurnwardenError,
  type JournalEntry,
  type ToolResultMessage,
  type TurnwardenError,
  type UserMessage,
} from '@turnwarden/protocol';
import { openSqliteStore, type SqliteStore } from '../sqlite-store.js';

/** The TurnwardenError `p` rejects with; anything else (a resolve, another error) fails the test. */
export async function refusal(p: Promise<unknown>): Promise<TurnwardenError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!isTurnwardenError(e)) throw new Error(`expected a TurnwardenError, got ${String(e)}`);
  return e;
}

/** A settable wall clock. */
export class FakeClock {
  constructor(public ms = 1_000_000) {}
  readonly now = (): number => this.ms;
  advance(ms: number): void {
    this.ms += ms;
  }
}

/** Temp directories and stores, cleaned up by `dispose()` (call it in afterEach). */
export class Sandbox {
  readonly #dirs: string[] = [];
  readonly #stores: SqliteStore[] = [];

  dir(): string {
    const dir = mkdtempSync(join(tmpdir(), 'turnwarden-store-'));
    this.#dirs.push(dir);
    return dir;
  }

  open(path: string, clock = new FakeClock()): SqliteStore {
    const store = openSqliteStore({ path, now: clock.now });
    this.#stores.push(store);
    return store;
  }

  memory(clock = new FakeClock()): SqliteStore {
    return this.open(':memory:', clock);
  }

  async dispose(): Promise<void> {
    for (const store of this.#stores.splice(0)) await store.close();
    for (const dir of this.#dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  }
}

export function user(commitKey: string, content = 'hello'): JournalEntry {
  const message: UserMessage = { role: 'user', content };
  return { commitKey, message };
}

export function assistant(commitKey: string, callIds: readonly string[] = [], content = ''): JournalEntry {
  const message: AssistantMessage = {
    role: 'assistant',
    content,
    ...(callIds.length === 0
      ? {}
      : { toolCalls: callIds.map((id) => ({ id, name: 'echo', arguments: '{}' })) }),
  };
  return { commitKey, message };
}

export function toolResult(
  commitKey: string,
  toolCallId: string,
  callIndex: number,
  extra: Partial<Pick<ToolResultMessage, 'content' | 'effect' | 'synthesized'>> = {},
): JournalEntry {
  const message: ToolResultMessage = {
    role: 'tool',
    toolCallId,
    callIndex,
    name: 'echo',
    content: extra.content ?? 'ok',
    isError: false,
    effect: extra.effect ?? 'applied',
    ...(extra.synthesized === undefined ? {} : { synthesized: extra.synthesized }),
  };
  return { commitKey, message };
}
