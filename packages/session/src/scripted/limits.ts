/** Limits a script must respect; a script beyond them is refused with INVALID_SCRIPT. */
import { MAX_DURATION_MS } from '../tools/checks.js';

export const SCRIPT_LIMITS = {
  /** Steps in one script. */
  maxSteps: 1000,
  /** UTF-8 bytes of one `text` step, and of one `fail` message. */
  maxTextBytes: 64 * 1024,
  /** Chunks of one `text` step. */
  maxChunks: 64 * 1024,
  /** Tool calls in one `tools` step. */
  maxToolCalls: 100,
  /** UTF-8 bytes of one tool call's argument text (large enough to exceed a turn's maxToolArgBytes). */
  maxArgsBytes: 256 * 1024,
  /** Characters of a tool name or a tool call id. */
  maxNameLength: 256,
  /** Any duration (`delayMs`, `sleep`, `heartbeat`, `everyMs`), in ms: one hour. */
  maxDurationMs: MAX_DURATION_MS,
} as const;

/** Default number of chunks of a `text` step. */
export const DEFAULT_CHUNKS = 4;
