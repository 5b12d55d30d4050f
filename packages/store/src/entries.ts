/**
 * Runtime check of journal entries (they cross threads, so their types prove nothing) and
 * normalization of each message into one canonical object: fixed key order, no unknown or
 * undefined fields. Its JSON is the stored body, and the body P1 compares on a retry.
 */

import type {
  EffectStatus,
  HistoryMessage,
  JournalEntry,
  ToolCall,
  ToolResultMessage,
} from '@turnwarden/protocol';
import { invalidInput } from './errors.js';
import type { AppendInput } from './types.js';
import {
  checkInteger,
  checkKey,
  checkKeys,
  checkObject,
  checkSession,
  checkString,
  checkText,
} from './validate.js';

export const MAX_COMMIT_KEY_LENGTH = 512;

const EFFECTS: readonly EffectStatus[] = ['applied', 'none', 'unknown'];

export type CheckedAppend = ReturnType<typeof checkAppend>;

/** The checks of an append that need no database (INVALID_INPUT naming the field). */
export function checkAppend(input: AppendInput) {
  const i = checkObject('input', input);
  checkKeys('input', i, ['workstreamId', 'generation', 'fencingToken', 'entries', 'session']);
  return {
    workstreamId: checkKey('workstreamId', i.workstreamId),
    generation: checkInteger('generation', i.generation, 0),
    token: i.fencingToken === undefined ? undefined : checkInteger('fencingToken', i.fencingToken, 1),
    entries: checkEntries(i.entries),
    session: i.session === undefined ? undefined : checkSession('session', i.session),
  };
}

export function checkEntries(value: unknown): JournalEntry[] {
  if (!Array.isArray(value)) throw invalidInput('entries', 'must be an array');
  return value.map((raw, i) => {
    const field = `entries[${i}]`;
    const entry = checkObject(field, raw);
    checkKeys(field, entry, ['commitKey', 'message']);
    return {
      commitKey: checkText(`${field}.commitKey`, entry.commitKey, MAX_COMMIT_KEY_LENGTH),
      message: checkMessage(`${field}.message`, entry.message),
    };
  });
}

function checkMessage(field: string, value: unknown): HistoryMessage {
  const m = checkObject(field, value);
  switch (m.role) {
    case 'user':
      checkKeys(field, m, ['role', 'content', 'principal']);
      return {
        role: 'user',
        content: checkString(`${field}.content`, m.content),
        ...(m.principal === undefined ? {} : { principal: checkString(`${field}.principal`, m.principal) }),
      };
    case 'system':
      checkKeys(field, m, ['role', 'content']);
      return { role: 'system', content: checkString(`${field}.content`, m.content) };
    case 'assistant':
      checkKeys(field, m, ['role', 'content', 'toolCalls']);
      return {
        role: 'assistant',
        content: checkString(`${field}.content`, m.content),
        ...(m.toolCalls === undefined
          ? {}
          : { toolCalls: checkToolCalls(`${field}.toolCalls`, m.toolCalls) }),
      };
    case 'tool':
      return checkToolResult(field, m);
    default:
      throw invalidInput(`${field}.role`, "must be 'user', 'system', 'assistant' or 'tool'");
  }
}

function checkToolCalls(field: string, value: unknown): ToolCall[] {
  if (!Array.isArray(value)) throw invalidInput(field, 'must be an array');
  return value.map((raw, i) => {
    const f = `${field}[${i}]`;
    const call = checkObject(f, raw);
    checkKeys(f, call, ['id', 'name', 'arguments']);
    return {
      id: checkString(`${f}.id`, call.id),
      name: checkString(`${f}.name`, call.name),
      arguments: checkString(`${f}.arguments`, call.arguments),
    };
  });
}

function checkToolResult(field: string, m: Record<string, unknown>): ToolResultMessage {
  checkKeys(field, m, [
    'role',
    'toolCallId',
    'callIndex',
    'name',
    'content',
    'isError',
    'effect',
    'synthesized',
  ]);
  if (typeof m.isError !== 'boolean') throw invalidInput(`${field}.isError`, 'must be a boolean');
  if (!EFFECTS.includes(m.effect as EffectStatus)) {
    throw invalidInput(`${field}.effect`, "must be 'applied', 'none' or 'unknown'");
  }
  if (m.synthesized !== undefined && typeof m.synthesized !== 'boolean') {
    throw invalidInput(`${field}.synthesized`, 'must be a boolean');
  }
  return {
    role: 'tool',
    toolCallId: checkString(`${field}.toolCallId`, m.toolCallId),
    callIndex: checkInteger(`${field}.callIndex`, m.callIndex, 0),
    name: checkString(`${field}.name`, m.name),
    content: checkString(`${field}.content`, m.content),
    isError: m.isError,
    effect: m.effect as EffectStatus,
    ...(m.synthesized === undefined ? {} : { synthesized: m.synthesized }),
  };
}
