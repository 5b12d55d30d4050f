/** Input checks (T5): refuse bad input with a typed error before anything is written. */
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';
import { parseScript } from '@turnwarden/session';
import type { LimitsConfig } from './config.js';
import type { SendInput } from './types.js';

const ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
const SEND_FIELDS: readonly string[] = ['tenantId', 'workstreamId', 'content', 'principal'];

export function invalid(message: string, field: string): TurnwardenError {
  return new TurnwardenError(ErrorCode.INVALID_INPUT, message, { details: { field } });
}

export function checkId(value: unknown, field: string): asserts value is string {
  if (typeof value !== 'string' || !ID_RE.test(value)) {
    throw invalid(`${field} must be 1–128 characters of A–Z a–z 0–9 . _ : -`, field);
  }
}

export function checkSendInput(input: SendInput, limits: LimitsConfig, model: string): void {
  if (typeof input !== 'object' || input === null) throw invalid('send input must be an object', 'input');
  for (const key of Object.keys(input)) {
    if (!SEND_FIELDS.includes(key)) throw invalid(`unknown field ${key}`, key);
  }
  checkId(input.tenantId, 'tenantId');
  checkId(input.workstreamId, 'workstreamId');
  if (input.principal !== undefined) checkId(input.principal, 'principal');
  if (typeof input.content !== 'string' || input.content.length === 0) {
    throw invalid('content must be a non-empty string', 'content');
  }
  if (Buffer.byteLength(input.content, 'utf8') > limits.maxMessageBytes) {
    throw invalid(`content exceeds ${limits.maxMessageBytes} bytes`, 'content');
  }
  if (model === 'scripted') parseScript(input.content); // INVALID_SCRIPT, nothing written
}
