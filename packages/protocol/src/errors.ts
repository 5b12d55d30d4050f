/**
 * Typed errors with stable codes (the table: error-codes.ts). They cross `postMessage` as plain
 * data (`toWire`) and are rebuilt on the other side (`fromWire`); check them with
 * `isTurnwardenError(e, code)`, never with `instanceof` (class identity does not survive threads
 * or duplicate package copies). Throw them with their code's constructor, `errors.*`.
 */
import { ERROR_TABLE, ErrorCode, type ErrorDetails } from './error-codes.js';

/**
 * The details a `TurnwardenError<C>` carries: the table's type for its code (any field of any
 * code's for the union of all), open to fields the table does not name — a newer peer's — and
 * possibly absent, as a wire error rebuilt from elsewhere may be.
 */
export type TurnwardenErrorDetails<C extends ErrorCode> =
  | (NonNullable<ErrorDetails<C>> & Readonly<Record<string, unknown>>)
  | undefined;

/** The plain-data form of an error, safe for structured clone. */
export interface WireError {
  readonly name: 'TurnwardenError';
  readonly code: ErrorCode;
  readonly message: string;
  readonly retryable: boolean;
  readonly details?: Readonly<Record<string, unknown>>;
}

/** What any error may be given besides its details. */
export interface TurnwardenErrorOptions {
  readonly cause?: unknown;
  /** Overrides the table's default (a store error whose retry may succeed). */
  readonly retryable?: boolean;
}

export class TurnwardenError<C extends ErrorCode = ErrorCode> extends Error {
  override readonly name = 'TurnwardenError' as const;
  readonly code: C;
  readonly retryable: boolean;
  readonly details: TurnwardenErrorDetails<C>;

  /** Any code, any details: for errors rebuilt from data. A throw site uses its code's `errors.*`. */
  constructor(
    code: C,
    message: string,
    options: TurnwardenErrorOptions & { readonly details?: Readonly<Record<string, unknown>> } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.retryable = options.retryable ?? ERROR_TABLE[code].retryable;
    this.details = options.details as TurnwardenErrorDetails<C>;
  }

  toWire(): WireError {
    return {
      name: 'TurnwardenError',
      code: this.code,
      message: this.message,
      retryable: this.retryable,
      ...(this.details === undefined ? {} : { details: this.details }),
    };
  }
}

const CODES: ReadonlySet<string> = new Set(Object.keys(ERROR_TABLE));

/** True for a TurnwardenError from any thread or package copy, optionally of one code. */
export function isTurnwardenError<C extends ErrorCode = ErrorCode>(
  e: unknown,
  code?: C,
): e is TurnwardenError<C> {
  if (typeof e !== 'object' || e === null) return false;
  const c = (e as { code?: unknown }).code;
  if ((e as { name?: unknown }).name !== 'TurnwardenError' || typeof c !== 'string' || !CODES.has(c)) {
    return false;
  }
  return code === undefined || c === code;
}

/** Plain data for any thrown value; unknown errors become INTERNAL. */
export function toWire(e: unknown): WireError {
  if (e instanceof TurnwardenError) return e.toWire();
  if (isTurnwardenError(e)) {
    const w = e as unknown as WireError;
    return {
      name: 'TurnwardenError',
      code: w.code,
      message: w.message,
      retryable: Boolean(w.retryable),
      ...(w.details === undefined ? {} : { details: w.details }),
    };
  }
  const message = e instanceof Error ? e.message : String(e);
  return { name: 'TurnwardenError', code: ErrorCode.INTERNAL, message, retryable: false };
}

/** Rebuilds a TurnwardenError from its wire form (or anything error-like). */
export function fromWire(w: unknown): TurnwardenError {
  if (w instanceof TurnwardenError) return w;
  const wire = toWire(w);
  return new TurnwardenError<ErrorCode>(wire.code, wire.message, {
    retryable: wire.retryable,
    ...(wire.details === undefined ? {} : { details: { ...wire.details } }),
  });
}

/** `LEASED_ELSEWHERE` → `leasedElsewhere`. */
type Camel<S extends string> = S extends `${infer H}_${infer T}`
  ? `${Lowercase<H>}${Pascal<T>}`
  : Lowercase<S>;
type Pascal<S extends string> = S extends `${infer H}_${infer T}`
  ? `${Capitalize<Lowercase<H>>}${Pascal<T>}`
  : Capitalize<Lowercase<S>>;

/** A code's constructor: its details as the table types them (required when they are). */
type Make<C extends ErrorCode> =
  undefined extends ErrorDetails<C>
    ? (message: string, details?: ErrorDetails<C>, options?: TurnwardenErrorOptions) => TurnwardenError<C>
    : (message: string, details: ErrorDetails<C>, options?: TurnwardenErrorOptions) => TurnwardenError<C>;

type Constructors = { readonly [C in ErrorCode as Camel<C>]: Make<C> };

/** One constructor per code: `errors.leasedElsewhere(message, { workstreamId, holder, … })`. */
export const errors = Object.fromEntries(
  (Object.keys(ERROR_TABLE) as ErrorCode[]).map((code) => [
    code.toLowerCase().replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()),
    (message: string, details?: Record<string, unknown>, options: TurnwardenErrorOptions = {}) =>
      new TurnwardenError<ErrorCode>(code, message, {
        ...options,
        ...(details === undefined ? {} : { details }),
      }),
  ]),
) as unknown as Constructors;
