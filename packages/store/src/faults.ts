/**
 * Fault injection for any Store (`@turnwarden/store/testing`): rules that make the journal's
 * appends fail the way real stores fail, for tests, the interleaving harness and the demo.
 *
 * A rule matches a batch by one of its entries and applies, at most `times` times:
 * - `reject`: the append fails with a non-transient STORE_ERROR; nothing is written.
 * - `transient`: it fails with a retryable STORE_ERROR (a busy database); nothing is written.
 * - `lose-ack`: the rows are written, then the call fails with a retryable STORE_ERROR (the
 *   acknowledgement was lost on the way back); a retry finds them (P1).
 * - `throw`: the call throws synchronously instead of returning a promise (a buggy store).
 * - `{ delayMs }`: the append runs after that delay (a slow store).
 * Group commits (`appendMany`) are judged batch by batch: a faulted batch gets its error in its
 * slot, the others are written together; a delay delays the whole group.
 */
import type { JournalEntry } from '@turnwarden/protocol';
import { errors, type TurnwardenError } from '@turnwarden/protocol';
import type { AppendInput, AppendOutcome, Store } from './types.js';

export type StoreFault = 'reject' | 'transient' | 'lose-ack' | 'throw' | { readonly delayMs: number };

export interface FaultRule {
  /** Which batches it applies to: one of their entries matches. */
  readonly match: (entry: JournalEntry) => boolean;
  readonly fault: StoreFault;
  /** How many matching batches it faults (default 1). */
  readonly times?: number;
}

export interface FaultyStore {
  readonly store: Store;
  /** Adds a rule; rules are tried in the order they were added. */
  inject(rule: FaultRule): void;
  /** Faults applied so far, by kind. */
  readonly applied: Readonly<Record<'reject' | 'transient' | 'lose-ack' | 'throw' | 'delay', number>>;
}

function storeError(message: string, retryable: boolean): TurnwardenError {
  return errors.storeError(`injected: ${message}`, { injected: true }, { retryable });
}

export function faultyStore(inner: Store): FaultyStore {
  const rules: { rule: FaultRule; left: number }[] = [];
  const applied = { reject: 0, transient: 0, 'lose-ack': 0, throw: 0, delay: 0 };
  /** The first live rule for a batch: `throw` rules, or the others. */
  const ruleFor = (input: AppendInput, throwing: boolean) =>
    rules.find(
      (x) =>
        x.left > 0 && (x.rule.fault === 'throw') === throwing && input.entries.some((e) => x.rule.match(e)),
    );
  /** The fault for a batch, consuming one use of the first rule that matches. */
  const faultFor = (input: AppendInput): Exclude<StoreFault, 'throw'> | undefined => {
    const r = ruleFor(input, false);
    if (r === undefined) return undefined;
    r.left--;
    applied[typeof r.rule.fault === 'string' ? r.rule.fault : 'delay']++;
    return r.rule.fault as Exclude<StoreFault, 'throw'>;
  };
  /** `throw` is synchronous: the caller gets an exception, not a rejected promise. */
  const throwIfRuled = (inputs: readonly AppendInput[]) => {
    for (const input of inputs) {
      const r = ruleFor(input, true);
      if (r === undefined) continue;
      r.left--;
      applied.throw++;
      throw storeError('the store threw', false);
    }
  };
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  const appendMessages = async (input: AppendInput): Promise<number[]> => {
    const fault = faultFor(input);
    if (fault === undefined) return inner.appendMessages(input);
    if (typeof fault === 'object') {
      await sleep(fault.delayMs);
      return inner.appendMessages(input);
    }
    switch (fault) {
      case 'reject':
        throw storeError('the store rejected the write', false);
      case 'transient':
        throw storeError('database is locked', true);
      case 'lose-ack':
        await inner.appendMessages(input);
        throw storeError('the acknowledgement was lost', true);
    }
  };

  const appendMany = async (inputs: readonly AppendInput[]): Promise<AppendOutcome[]> => {
    const faults = inputs.map(faultFor);
    const delay = Math.max(0, ...faults.map((f) => (typeof f === 'object' ? f.delayMs : 0)));
    if (delay > 0) await sleep(delay);
    const outcomes: AppendOutcome[] = new Array(inputs.length);
    const pass: number[] = [];
    faults.forEach((f, i) => {
      if (f === undefined || typeof f === 'object' || f === 'lose-ack') pass.push(i);
      else if (f === 'transient') outcomes[i] = { error: storeError('database is locked', true) };
      else outcomes[i] = { error: storeError('the store rejected the write', false) };
    });
    const written =
      inner.appendMany !== undefined
        ? await inner.appendMany(pass.map((i) => inputs[i]!))
        : await Promise.all(
            pass.map((i) =>
              inner.appendMessages(inputs[i]!).then(
                (seqs): AppendOutcome => ({ seqs }),
                (error: TurnwardenError): AppendOutcome => ({ error }),
              ),
            ),
          );
    pass.forEach((i, k) => {
      const o = written[k]!;
      outcomes[i] =
        faults[i] === 'lose-ack' && 'seqs' in o
          ? { error: storeError('the acknowledgement was lost', true) }
          : o;
    });
    return outcomes;
  };

  const store = new Proxy(inner, {
    get(target, key, receiver) {
      if (key === 'appendMessages') {
        return (input: AppendInput) => {
          throwIfRuled([input]);
          return appendMessages(input);
        };
      }
      if (key === 'appendMany') {
        if (inner.appendMany === undefined) return undefined;
        return (inputs: readonly AppendInput[]) => {
          throwIfRuled(inputs);
          return appendMany(inputs);
        };
      }
      const value = Reflect.get(target, key, receiver) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return {
    store,
    inject(rule) {
      rules.push({ rule, left: rule.times ?? 1 });
    },
    applied,
  };
}
