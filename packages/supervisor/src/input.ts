/** Input checks (T5): refuse bad input with a typed error before anything is written. */
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';
import type { LimitsConfig } from './config.js';

/** The limits a call's input is checked against. */
type InputLimits = Omit<LimitsConfig, 'maxQueuedSends'>;

import type { CompactInput, RewindInput, SendInput } from './types.js';

const ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
const CALLER_FIELDS = ['tenantId', 'principal'] as const;
const SEND_FIELDS: readonly string[] = ['content', 'signal', 'tools', 'maxWaitMs'];
const COMPACT_FIELDS: readonly string[] = ['throughSeq', 'summary', 'commitKey'];
const REWIND_FIELDS: readonly string[] = ['turns', 'ifLastSeq'];
/** More turns than any rewind needs; a larger count is a caller's bug. */
const MAX_REWIND_TURNS = 10_000;

export function invalid(message: string, field: string): TurnwardenError {
  return new TurnwardenError(ErrorCode.INVALID_INPUT, message, { details: { field } });
}

export function checkId(value: unknown, field: string): asserts value is string {
  if (typeof value !== 'string' || !ID_RE.test(value)) {
    throw invalid(`${field} must be 1–128 characters of A–Z a–z 0–9 . _ : -`, field);
  }
}

/** A call's one argument: an object whose fields are all known. */
export function checkFields(input: unknown, allowed: readonly string[], call: string): void {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw invalid(`${call} takes one object argument`, 'input');
  }
  for (const key of Object.keys(input)) {
    if (!allowed.includes(key)) throw invalid(`${call}: unknown field ${key}`, key);
  }
}

/**
 * T1: `{ tenantId, principal }` — who calls — and nothing else (plus `extra` fields the call
 * checks). Every call is checked by this or by `checkRef`, before anything is read or written.
 */
export function checkCaller(input: unknown, call: string, extra: readonly string[] = []): void {
  checkFields(input, [...CALLER_FIELDS, ...extra], call);
  const caller = input as { tenantId?: unknown; principal?: unknown };
  checkId(caller.tenantId, 'tenantId');
  checkId(caller.principal, 'principal');
}

/** `{ tenantId, principal, workstreamId }` and nothing else (plus `extra` fields the call checks). */
export function checkRef(input: unknown, call: string, extra: readonly string[] = []): void {
  checkCaller(input, call, ['workstreamId', ...extra]);
  checkId((input as { workstreamId?: unknown }).workstreamId, 'workstreamId');
}

function checkText(value: unknown, field: string, maxBytes: number): void {
  if (typeof value !== 'string' || value.trim().length === 0) {
    throw invalid(`${field} must be a string with some non-whitespace text`, field);
  }
  if (Buffer.byteLength(value, 'utf8') > maxBytes) throw invalid(`${field} exceeds ${maxBytes} bytes`, field);
}

/** A send's tool allow-list: distinct names, each registered (`known`: what the workers hold). */
function checkToolNames(tools: unknown, known: readonly string[] | undefined): void {
  if (!Array.isArray(tools)) throw invalid('tools must be an array of tool names', 'tools');
  const seen = new Set<string>();
  for (const name of tools) {
    if (typeof name !== 'string' || name.length === 0)
      throw invalid('tools must be an array of tool names', 'tools');
    if (seen.has(name)) throw invalid(`tools names ${name} twice`, 'tools');
    if (known && !known.includes(name))
      throw invalid(`tools names ${name}, which is not registered`, 'tools');
    seen.add(name);
  }
}

export function checkSendInput(input: SendInput, limits: InputLimits, known?: readonly string[]): void {
  checkRef(input, 'send', SEND_FIELDS);
  if (input.signal !== undefined && !(input.signal instanceof AbortSignal)) {
    throw invalid('signal must be an AbortSignal', 'signal');
  }
  if (input.tools !== undefined) checkToolNames(input.tools, known);
  if (
    input.maxWaitMs !== undefined &&
    (!Number.isSafeInteger(input.maxWaitMs) || input.maxWaitMs < 0 || input.maxWaitMs > 3_600_000)
  ) {
    throw invalid('maxWaitMs must be an integer from 0 to 3600000', 'maxWaitMs');
  }
  checkText(input.content, 'content', limits.maxMessageBytes);
}

export function checkCompactInput(input: CompactInput, limits: InputLimits): void {
  checkRef(input, 'compact', COMPACT_FIELDS);
  if (!Number.isSafeInteger(input.throughSeq) || input.throughSeq < 1) {
    throw invalid('throughSeq must be a positive integer', 'throughSeq');
  }
  checkText(input.summary, 'summary', limits.maxMessageBytes);
  if (
    input.commitKey !== undefined &&
    (typeof input.commitKey !== 'string' || input.commitKey.length === 0)
  ) {
    throw invalid('commitKey must be a non-empty string', 'commitKey');
  }
}

export function checkRewindInput(input: RewindInput): void {
  checkRef(input, 'rewind', REWIND_FIELDS);
  if (!Number.isSafeInteger(input.turns) || input.turns < 1 || input.turns > MAX_REWIND_TURNS) {
    throw invalid(`turns must be an integer from 1 to ${MAX_REWIND_TURNS}`, 'turns');
  }
  if (input.ifLastSeq !== undefined && (!Number.isSafeInteger(input.ifLastSeq) || input.ifLastSeq < 0)) {
    throw invalid('ifLastSeq must be a non-negative integer', 'ifLastSeq');
  }
}
