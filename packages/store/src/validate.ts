import {
  Bounds,
  DOUBLE_TEXTING_POLICIES,
  type DoubleTexting,
  ID_RULE,
  inBound,
  isId,
  isWorkstreamKey,
  keyTenantId,
  Lengths,
  WORKSTREAM_KEY_RULE,
} from '@turnwarden/protocol';
import { invalidInput } from './errors.js';

/** Lease holders, incarnations, `replacing` prefixes (the API's rule, packages/protocol). */
export const MAX_HOLDER_LENGTH = Lengths.holder.max;

/** Workstream and tenant ids (T5), by the API's rule. */
export function checkId(field: string, value: unknown): string {
  if (!isId(value)) throw invalidInput(field, ID_RULE);
  return value;
}

/** A workstream's key: its id, or its tenant's and its own joined by `/` (T2, rules.ts). */
export function checkKey(field: string, value: unknown): string {
  if (!isWorkstreamKey(value)) throw invalidInput(field, WORKSTREAM_KEY_RULE);
  return value;
}

/** A new workstream's key: one with a tenant part names the workstream's own tenant (T2). */
export function checkOwnKey(id: string, tenantId: string): void {
  if (id.includes('/') && keyTenantId(id) !== tenantId) {
    throw invalidInput('id', `must name the workstream's tenant (${tenantId}/…) when it has a tenant part`);
  }
}

/** A non-empty string of at most `maxLength` characters. */
export function checkText(field: string, value: unknown, maxLength: number): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > maxLength) {
    throw invalidInput(field, `must be a non-empty string of at most ${maxLength} characters`);
  }
  return value;
}

/** A double-texting policy, or absent (issue 26). */
export function checkDoubleTexting(field: string, value: unknown): DoubleTexting | undefined {
  if (value === undefined) return undefined;
  if (!(DOUBLE_TEXTING_POLICIES as readonly unknown[]).includes(value)) {
    throw invalidInput(field, `must be one of ${DOUBLE_TEXTING_POLICIES.join(', ')}`);
  }
  return value as DoubleTexting;
}

export function checkString(field: string, value: unknown): string {
  if (typeof value !== 'string') throw invalidInput(field, 'must be a string');
  return value;
}

export function checkInteger(field: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw invalidInput(field, `must be an integer >= ${min}`);
  }
  return value;
}

export function checkObject(field: string, value: unknown): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalidInput(field, 'must be an object');
  }
  return value as Record<string, unknown>;
}

/** Refuses fields outside `allowed` (T5: unknown fields). */
export function checkKeys(field: string, value: Record<string, unknown>, allowed: readonly string[]): void {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) throw invalidInput(`${field}.${key}`, 'is not a known field');
  }
}

/** A `readHistoryPage` query: `afterSeq` from 0, `limit` within the store's page bound. */
export function checkPage(value: unknown): { afterSeq: number; limit: number } {
  const page = checkObject('page', value);
  checkKeys('page', page, ['afterSeq', 'limit']);
  const afterSeq = checkInteger('page.afterSeq', page.afterSeq, 0);
  const bound = Bounds.storeHistoryPage;
  if (!inBound(page.limit, bound)) {
    throw invalidInput('page.limit', `must be an integer from ${bound.min} to ${bound.max}`);
  }
  return { afterSeq, limit: page.limit };
}

/** Largest stored session snapshot (JSON characters); a snapshot is a few hundred. */
const MAX_SESSION_LENGTH = 65_536;

/** A session machine snapshot: a JSON object with a state `value`. Returns its JSON. */
export function checkSession(field: string, value: unknown): string {
  const o = checkObject(field, value);
  if (!('value' in o)) throw invalidInput(field, 'must be a session snapshot (no value)');
  let json: string;
  try {
    json = JSON.stringify(o);
  } catch {
    throw invalidInput(field, 'must be JSON');
  }
  if (json.length > MAX_SESSION_LENGTH) throw invalidInput(field, `exceeds ${MAX_SESSION_LENGTH} characters`);
  return json;
}
