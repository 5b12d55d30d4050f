/**
 * A parsed, validated script (see the session README for the script language). Defaults are
 * filled in: every step is complete, every tool call has its id and its argument text.
 */
import type { ToolCall } from '@turnwarden/protocol';

export type ScriptStep =
  /** Stream `text` in `chunks` pieces, waiting `delayMs` between two pieces. */
  | { readonly kind: 'text'; readonly text: string; readonly chunks: number; readonly delayMs: number }
  /** Emit these tool calls, in order, then end the assistant message (and the segment). */
  | { readonly kind: 'tools'; readonly calls: readonly ToolCall[] }
  /** Wait `ms` without progress. */
  | { readonly kind: 'sleep'; readonly ms: number }
  /** Heartbeat every `everyMs` for `ms`: progress without output. */
  | { readonly kind: 'heartbeat'; readonly ms: number; readonly everyMs: number }
  /** Await a promise that never settles and ignores the signal. */
  | { readonly kind: 'stall' }
  /** Spin in a synchronous infinite loop. */
  | { readonly kind: 'wedge' }
  /** Throw TurnwardenError(MODEL_ERROR, message). */
  | { readonly kind: 'fail'; readonly message: string };

export type ScriptStepKind = ScriptStep['kind'];

/** The steps of one model call: up to and including a `tools` step. */
export type ScriptSegment = readonly ScriptStep[];

export interface Script {
  readonly steps: readonly ScriptStep[];
  /**
   * The steps split after every `tools` step. Model call k of a turn plays `segments[k]`;
   * never holds an empty segment (a script ending with `tools` has nothing after it).
   */
  readonly segments: readonly ScriptSegment[];
}
