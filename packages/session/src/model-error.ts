import { errors, isTurnwardenError, type TurnwardenError } from '@turnwarden/protocol';

/** What a plugin threw, as a typed error: its message, or — a plain object — what it holds. */
export function asModelError(e: unknown): TurnwardenError {
  if (isTurnwardenError(e)) return e;
  const message = (e as { message?: unknown } | undefined)?.message;
  if (typeof message === 'string') return errors.modelError(message);
  let text: string;
  try {
    text = typeof e === 'object' && e !== null ? JSON.stringify(e) : String(e);
  } catch {
    text = String(e); // a cycle
  }
  return errors.modelError(text.length > 500 ? `${text.slice(0, 500)}…` : text);
}
