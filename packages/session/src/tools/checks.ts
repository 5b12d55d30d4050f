/**
 * Checks for values that came from JSON (scripts, tool arguments). Each returns a problem
 * phrase ("must be …") or undefined; callers prefix it with the path of the value and wrap it
 * in their own error code.
 */

/** The longest duration a script step or demo tool accepts: one hour. */
export const MAX_DURATION_MS = 3_600_000;

/** A JSON object (not null, not an array). */
export function isJsonObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Keys of `obj` that are not in `allowed`, in their order. */
export function unknownKeys(obj: Record<string, unknown>, allowed: readonly string[]): string[] {
  return Object.keys(obj).filter((key) => !allowed.includes(key));
}

/** A duration in milliseconds: an integer from 0 to MAX_DURATION_MS. */
export function durationProblem(value: unknown): string | undefined {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    return 'must be a non-negative integer';
  }
  if (value > MAX_DURATION_MS) return `must be at most ${MAX_DURATION_MS} (1 hour)`;
  return undefined;
}

/** An interval in milliseconds: an integer from 1 to MAX_DURATION_MS. */
export function intervalProblem(value: unknown): string | undefined {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    return 'must be a positive integer';
  }
  if (value > MAX_DURATION_MS) return `must be at most ${MAX_DURATION_MS} (1 hour)`;
  return undefined;
}
