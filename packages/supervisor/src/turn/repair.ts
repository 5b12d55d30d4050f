/**
 * Structural repair (S2): synthesizes a result for every tool call occurrence that has none,
 * with effect `unknown` — or `none` when the call provably never started — and a message
 * saying why. Written under a lease (P6) with the commit key the tool's own result would have
 * had, so a retry is idempotent (P1). This is the session machine's `repair` actor on the
 * supervisor's side: the one place results are synthesized.
 */
import type { JournalEntry, OpenToolCall, ToolResultMessage } from '@turnwarden/protocol';
import { openToolCalls } from '@turnwarden/protocol';
import type { TurnStore } from '@turnwarden/store';

export interface RepairInput {
  readonly store: Pick<TurnStore, 'readHistory' | 'appendMessages'>;
  readonly workstreamId: string;
  readonly generation: number;
  readonly fencingToken: number;
  /** Why the calls did not complete, for the synthesized message ("aborted by the watchdog"). */
  readonly why: string;
  /**
   * Call indexes (of the last assistant message) the worker reported as started. Undefined
   * when the worker died: then nothing is provably unstarted and every effect is `unknown`.
   */
  readonly startedCalls: readonly number[] | undefined;
  /** Told once the synthesized rows are durable, with their seqs (they are announced, E2). */
  readonly durable?: (entries: readonly JournalEntry[], seqs: readonly number[]) => void;
}

function synthesizedResult(open: OpenToolCall, why: string, neverStarted: boolean): ToolResultMessage {
  const effect = neverStarted ? 'none' : 'unknown';
  return {
    role: 'tool',
    toolCallId: open.call.id,
    callIndex: open.callIndex,
    name: open.call.name,
    content: neverStarted
      ? `Tool call not run: the turn was ${why} before it started.`
      : `Tool call did not complete: the turn was ${why}. Its effect is unknown.`,
    isError: true,
    effect,
    synthesized: true,
  };
}

/** Returns how many results were synthesized (0 when the history was already complete). */
export async function repairOpenCalls(input: RepairInput): Promise<number> {
  const rows = await input.store.readHistory(input.workstreamId);
  const open = openToolCalls(rows);
  if (open.length === 0) return 0;
  const started = input.startedCalls === undefined ? undefined : new Set(input.startedCalls);
  const entries: JournalEntry[] = open.map((o) => ({
    commitKey: `${o.assistantKey}:t${o.callIndex}`,
    message: synthesizedResult(o, input.why, started !== undefined && !started.has(o.callIndex)),
  }));
  const seqs = await input.store.appendMessages({
    workstreamId: input.workstreamId,
    generation: input.generation,
    fencingToken: input.fencingToken,
    entries,
  });
  input.durable?.(entries, seqs);
  return entries.length;
}
