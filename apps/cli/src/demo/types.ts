/** What the demo records about each turn it ran. */
import type { TurnStatus } from '@turnwarden/protocol';
import type { Expectation, TurnKind } from './workload.js';

/** `rejected`: `send` refused the message (over capacity it waits instead; a refusal is a failed check). */
export type ObservedStatus = TurnStatus | 'rejected';

export type Verdict =
  /** The turn ended as its kind must. */
  | 'ok'
  /** A turn that kept making progress was aborted by the watchdog (breaks L2). */
  | 'false_abort'
  /** A stalled or wedged turn was not interrupted, or its worker not terminated (breaks L1/L3). */
  | 'not_recovered'
  /** A turn that should have completed failed, was refused or interrupted for another reason. */
  | 'unexpected_failure'
  /** The demo was stopped (Ctrl-C) while the turn ran: not judged. */
  | 'cancelled';

export type RecordKind = TurnKind | 'idle-check';

export interface TurnRecord {
  readonly workstreamId: string;
  /** 1-based; the idle check is `total + 1`. */
  readonly index: number;
  /** Planned turns of the workstream (without the idle check). */
  readonly total: number;
  readonly kind: RecordKind;
  readonly variant: string;
  readonly expected: Expectation;
  readonly generation?: number;
  readonly status: ObservedStatus;
  readonly abortReason?: string;
  readonly workerTerminated: boolean;
  /** Tool results synthesized by recovery (S2). */
  readonly synthesized: number;
  /** An approval turn: how the driver decided its wait (A1–A4). */
  readonly approval?: 'approved' | 'denied' | 'timed_out';
  /**
   * A double-text turn (M1–M4): how the second message ended — `refused` (reject), or the status
   * of its turn — and whether the first turn's rows were rolled back (its user row gone).
   */
  readonly doubleText?: {
    readonly policy: 'reject' | 'enqueue' | 'interrupt' | 'rollback';
    readonly second: 'refused' | 'completed' | 'interrupted' | 'failed' | 'awaiting_approval' | 'not_sent';
    readonly rolledBack: boolean;
  };
  /** From the accepted `send` to the turn's `done`. */
  readonly durationMs: number;
  /** The workstream's tenant. */
  readonly tenant: string;
  /** From the send to the turn's start: time spent waiting for a worker (T4). */
  readonly waitMs: number;
  readonly errorCode?: string;
  readonly errorMessage?: string;
  readonly verdict: Verdict;
}
