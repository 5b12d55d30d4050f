/**
 * The conversation history: what is journaled, replayed to the model and checked for
 * structure (S1: every assistant tool call occurrence is followed by exactly one result).
 */

export interface ToolCall {
  /** Provider-assigned id. Not unique: duplicates are counted by occurrence (S1). */
  readonly id: string;
  readonly name: string;
  /** The arguments as the model produced them (JSON text, possibly malformed: T6). */
  readonly arguments: string;
}

/** What a tool result says about the tool's side effects. */
export type EffectStatus =
  /** The tool ran to completion. */
  | 'applied'
  /** The tool provably never started (S2). */
  | 'none'
  /** The tool may or may not have had its effect (interrupted, crashed, wedged). */
  | 'unknown';

export interface UserMessage {
  readonly role: 'user';
  readonly content: string;
  readonly principal?: string;
}
export interface SystemMessage {
  readonly role: 'system';
  readonly content: string;
}
export interface AssistantMessage {
  readonly role: 'assistant';
  readonly content: string;
  readonly toolCalls?: readonly ToolCall[];
}
export interface ToolResultMessage {
  readonly role: 'tool';
  /** The provider id of the call this answers. */
  readonly toolCallId: string;
  /** Index of the call in its assistant message's `toolCalls`: identifies the occurrence. */
  readonly callIndex: number;
  readonly name: string;
  readonly content: string;
  readonly isError: boolean;
  readonly effect: EffectStatus;
  /** Written by recovery, not by the tool (S2). */
  readonly synthesized?: boolean;
}

export type HistoryMessage = UserMessage | SystemMessage | AssistantMessage | ToolResultMessage;

/** A journaled row. */
export interface HistoryRow {
  readonly workstreamId: string;
  /** Position in the workstream's history, from 1, gap-free. */
  readonly seq: number;
  /** Stable idempotency key (P1). */
  readonly commitKey: string;
  /** Turn generation that wrote it (0 for rows written outside a turn). */
  readonly generation: number;
  readonly message: HistoryMessage;
  readonly createdAt: number;
  /**
   * The fencing token of the lease the writer held (P6), when it wrote under one. Within a
   * workstream the tokens never decrease along the seqs: no row from a superseded holder.
   */
  readonly fencingToken?: number;
}

/** A tool call occurrence that has no result yet. */
export interface OpenToolCall {
  /** Commit key of the assistant row that made the call. */
  readonly assistantKey: string;
  readonly callIndex: number;
  readonly call: ToolCall;
}

/**
 * The tool call occurrences of the last assistant message that have no result (S1).
 * Only the last assistant message can have open calls in a structurally valid history;
 * an earlier one with missing results is reported too (it would be a corrupt history).
 */
export function openToolCalls(rows: readonly Pick<HistoryRow, 'commitKey' | 'message'>[]): OpenToolCall[] {
  const open: OpenToolCall[] = [];
  let current: { key: string; calls: readonly ToolCall[]; answered: boolean[] } | undefined;
  const flush = () => {
    if (!current) return;
    current.calls.forEach((call, callIndex) => {
      if (!current?.answered[callIndex]) open.push({ assistantKey: current!.key, callIndex, call });
    });
    current = undefined;
  };
  for (const row of rows) {
    const m = row.message;
    if (m.role === 'tool') {
      if (current && m.callIndex >= 0 && m.callIndex < current.calls.length)
        current.answered[m.callIndex] = true;
      continue;
    }
    flush();
    if (m.role === 'assistant' && m.toolCalls && m.toolCalls.length > 0) {
      current = { key: row.commitKey, calls: m.toolCalls, answered: m.toolCalls.map(() => false) };
    }
  }
  flush();
  return open;
}

/**
 * Checks that `next` may be appended after `rows` without breaking S1: a tool result must
 * answer an open occurrence of the last assistant message, exactly once; a non-tool message
 * may not follow an assistant message whose calls are not all answered.
 * Returns a reason when refused, undefined when admissible.
 */
export function structuralRefusal(
  rows: readonly Pick<HistoryRow, 'commitKey' | 'message'>[],
  next: HistoryMessage,
): string | undefined {
  const open = openToolCalls(rows);
  if (next.role === 'tool') {
    const match = open.find((o) => o.callIndex === next.callIndex && o.call.id === next.toolCallId);
    if (!match) {
      return `tool result for ${next.toolCallId}#${next.callIndex} answers no open call occurrence`;
    }
    return undefined;
  }
  if (open.length > 0) {
    return `${open.length} tool call(s) still need results before a ${next.role} message`;
  }
  return undefined;
}
