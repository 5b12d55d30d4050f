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
import { expect } from 'vitest';
import { openSqliteStore, type SqliteStore } from '../sqlite-store.js';
import type { Store } from '../types.js';

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

/**
 * T2: rows of a database written before per-tenant keys (SQLite's schema 3, PostgreSQL's 1) — a
 * workstream with history, a lease and a session; one without; the lease row of one deleted.
 * `yes`: the dialect's true.
 */
export const preKeyRows = (yes: string) => `
  INSERT INTO workstreams (id, tenant_id, incarnation, generation, status, created_at, session)
    VALUES ('w', 't', 'inc-1', 1, 'open', 1, '{"value":"idle","context":{"workstreamId":"w"}}'),
           ('fresh', 'u', 'inc-2', 0, 'open', 1, NULL);
  INSERT INTO messages (workstream_id, seq, commit_key, generation, role, body, created_at, fencing_token)
    VALUES ('w', 1, 'g1:u', 1, 'user', '{"role":"user","content":"hi"}', 1, 1),
           ('w', 2, 'g1:a', 1, 'assistant', '{"role":"assistant","content":"hello"}', 1, 1);
  INSERT INTO turn_leases (workstream_id, holder, token, acquired_at, expires_at, released)
    VALUES ('w', 'h', 3, 1, 2, ${yes}), ('gone', 'h', 7, 1, 2, ${yes});
`;

/** What a store opened on `preKeyRows` reads: every workstream under its key, none by bare id. */
export async function carriedOverToKeys(store: Store) {
  return {
    history: (await store.readHistory('t/w')).map((r) => r.commitKey),
    w: await store.getWorkstream('t/w'),
    bare: await store.getWorkstream('w'),
    fresh: (await store.getWorkstream('u/fresh'))?.tenantId,
    lease: (await store.getLease('t/w'))?.token,
  };
}

/** `carriedOverToKeys`' answer for a database carried over right. */
export const CARRIED_OVER = {
  history: ['g1:u', 'g1:a'],
  w: expect.objectContaining({ tenantId: 't', incarnation: 'inc-1', generation: 1 }),
  bare: undefined,
  fresh: 'u',
  lease: 3,
};
