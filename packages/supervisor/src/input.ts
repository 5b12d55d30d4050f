/**
 * Input checks (T5): refuse bad input with a typed error before anything is written. The ids,
 * bounds and enums are the API's rules (packages/protocol/src/rules.ts), which the server's
 * schemas are built from too.
 */
import {
  type Bound,
  Bounds,
  DOUBLE_TEXTING_POLICIES,
  errors,
  ID_RULE,
  inBound,
  isId,
  Lengths,
  ofLength,
  type TurnwardenError,
  WORKSTREAM_STATUSES,
} from '@turnwarden/protocol';
import type { LimitsConfig } from './config.js';
import type {
  ApproveInput,
  CloseInput,
  CompactInput,
  DeleteInput,
  DenyInput,
  HistoryInput,
  ListWorkstreamsInput,
  RewindInput,
  SendInput,
} from './types.js';

/** The limits a call's input is checked against. */
type InputLimits = Omit<LimitsConfig, 'maxQueuedSends'>;

const CALLER_FIELDS = ['tenantId', 'principal'] as const;
const SEND_FIELDS: readonly string[] = [
  'content',
  'signal',
  'tools',
  'maxWaitMs',
  'requireApproval',
  'doubleTexting',
];
const COMPACT_FIELDS: readonly string[] = ['throughSeq', 'summary', 'commitKey'];
const REWIND_FIELDS: readonly string[] = ['turns', 'ifLastSeq'];

export function invalid(message: string, field: string): TurnwardenError {
  return errors.invalidInput(message, { field });
}

export function checkId(value: unknown, field: string): asserts value is string {
  if (!isId(value)) throw invalid(`${field} ${ID_RULE}`, field);
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

/** A double-texting policy (M1–M4), or absent. */
export function checkDoubleTexting(value: unknown): void {
  if (value !== undefined && !(DOUBLE_TEXTING_POLICIES as readonly unknown[]).includes(value)) {
    throw invalid(`doubleTexting must be one of ${DOUBLE_TEXTING_POLICIES.join(', ')}`, 'doubleTexting');
  }
}

export function checkSendInput(input: SendInput, limits: InputLimits, known?: readonly string[]): void {
  checkRef(input, 'send', SEND_FIELDS);
  if (input.signal !== undefined && !(input.signal instanceof AbortSignal)) {
    throw invalid('signal must be an AbortSignal', 'signal');
  }
  if (input.tools !== undefined) checkToolNames(input.tools, known);
  if (input.requireApproval !== undefined && input.requireApproval !== 'all') {
    try {
      checkToolNames(input.requireApproval, known);
    } catch (e) {
      throw invalid(
        `requireApproval must be 'all' or registered tool names: ${(e as Error).message}`,
        'requireApproval',
      );
    }
  }
  if (input.maxWaitMs !== undefined) checkInteger(input.maxWaitMs, 'maxWaitMs', Bounds.maxWaitMs);
  checkDoubleTexting(input.doubleTexting);
  checkText(input.content, 'content', limits.maxMessageBytes);
}

/** `approve` and `deny`: the token, edited arguments (an object) or a reason (text). */
export function checkDecisionInput(input: ApproveInput | DenyInput, call: 'approve' | 'deny'): void {
  checkRef(input, call, call === 'approve' ? ['token', 'arguments'] : ['token', 'reason']);
  const { token } = input;
  if (typeof token !== 'string' || token.length === 0 || token.length > 128)
    throw invalid('token must be an approval token (a string)', 'token');
  if (call === 'approve') {
    const args = (input as ApproveInput).arguments;
    if (args !== undefined && (typeof args !== 'object' || args === null || Array.isArray(args)))
      throw invalid('arguments must be an object', 'arguments');
  } else {
    const { reason } = input as DenyInput;
    if (reason !== undefined) checkText(reason, 'reason', 4_096);
  }
}

export function checkCompactInput(input: CompactInput, limits: InputLimits): void {
  checkRef(input, 'compact', COMPACT_FIELDS);
  if (!inBound(input.throughSeq, Bounds.throughSeq)) {
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
  checkInteger(input.turns, 'turns', Bounds.rewindTurns);
  if (input.ifLastSeq !== undefined && !inBound(input.ifLastSeq, Bounds.ifLastSeq)) {
    throw invalid('ifLastSeq must be a non-negative integer', 'ifLastSeq');
  }
}

/** `listWorkstreams`: a page size within its bound and a known status (the cursor is decoded there). */
export function checkListInput(input: ListWorkstreamsInput): void {
  checkCaller(input, 'listWorkstreams', ['status', 'limit', 'cursor']);
  if (input.limit !== undefined) checkInteger(input.limit, 'limit', Bounds.limit);
  if (input.status !== undefined && !WORKSTREAM_STATUSES.includes(input.status)) {
    throw invalid(`status must be ${WORKSTREAM_STATUSES.map((s) => `'${s}'`).join(' or ')}`, 'status');
  }
}

/** `history`: a page size within its bound (the cursor is decoded where the read goes on, streams.ts). */
export function checkHistoryInput(input: HistoryInput): void {
  checkRef(input, 'history', ['limit', 'cursor']);
  if (input.limit !== undefined) checkInteger(input.limit, 'limit', Bounds.historyLimit);
}

export function checkDeleteInput(input: DeleteInput): void {
  checkRef(input, 'deleteWorkstream', ['incarnation']);
  if (!ofLength(input.incarnation, Lengths.incarnation)) {
    throw invalid('incarnation must be the one createWorkstream or getWorkstream returned', 'incarnation');
  }
}

export function checkCloseInput(input: CloseInput): void {
  checkRef(input, 'close', ['waitMs']);
  if (input.waitMs !== undefined) checkInteger(input.waitMs, 'waitMs', Bounds.waitMs);
}

/** An integer within `bound`, named by its field and bound as the refusal says it. */
function checkInteger(value: unknown, field: string, bound: Bound): void {
  if (!inBound(value, bound))
    throw invalid(`${field} must be an integer from ${bound.min} to ${bound.max}`, field);
}
