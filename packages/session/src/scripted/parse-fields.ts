/** Field checks of the script parser: each returns the valid value or throws INVALID_SCRIPT at `path`. */
import { Buffer } from 'node:buffer';
import { durationProblem, intervalProblem, isJsonObject, unknownKeys } from '../tools/checks.js';
import { invalidScript } from './invalid.js';
import { SCRIPT_LIMITS } from './limits.js';

/** An object whose keys are all in `allowed`; `what` names it in the message ("a text step"). */
export function objectAt(
  value: unknown,
  path: string,
  allowed: readonly string[],
  what: string,
): Record<string, unknown> {
  if (!isJsonObject(value)) throw invalidScript(path, 'must be an object');
  const extra = unknownKeys(value, allowed)[0];
  if (extra !== undefined) {
    throw invalidScript(
      `${path}.${extra}`,
      `is not allowed in ${what} (allowed keys: ${allowed.join(', ')})`,
    );
  }
  return value;
}

export function durationAt(value: unknown, path: string): number {
  const problem = durationProblem(value);
  if (problem !== undefined) throw invalidScript(path, problem);
  return value as number;
}

export function intervalAt(value: unknown, path: string): number {
  const problem = intervalProblem(value);
  if (problem !== undefined) throw invalidScript(path, problem);
  return value as number;
}

export function countAt(value: unknown, path: string, max: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw invalidScript(path, 'must be a positive integer');
  }
  if (value > max) throw invalidScript(path, `must be at most ${max}`);
  return value;
}

/** A string of at most `maxBytes` UTF-8 bytes; `nonEmpty` refuses "". */
export function textAt(value: unknown, path: string, maxBytes: number, nonEmpty = false): string {
  if (typeof value !== 'string' || (nonEmpty && value.length === 0)) {
    throw invalidScript(path, nonEmpty ? 'must be a non-empty string' : 'must be a string');
  }
  if (Buffer.byteLength(value, 'utf8') > maxBytes) {
    throw invalidScript(path, `must be at most ${maxBytes} UTF-8 bytes`);
  }
  return value;
}

/** A tool name or call id: a non-empty string of bounded length. */
export function nameAt(value: unknown, path: string): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw invalidScript(path, 'must be a non-empty string');
  }
  if (value.length > SCRIPT_LIMITS.maxNameLength) {
    throw invalidScript(path, `must be at most ${SCRIPT_LIMITS.maxNameLength} characters`);
  }
  return value;
}

/** `true`, the only value of the `stall` and `wedge` keys. */
export function trueAt(value: unknown, path: string): true {
  if (value !== true) throw invalidScript(path, 'must be true');
  return true;
}
