import type { HistoryRow } from '@turnwarden/protocol';
import type { TurnResult, TurnwardenEvent } from '@turnwarden/supervisor/harness';

export interface LogLine {
  readonly level: number;
  readonly msg: string;
  readonly [key: string]: unknown;
}

/** One release of the watchdog between its stall sample and its commit. */
export interface CommitAttempt {
  /** The activity version the watchdog sampled. */
  readonly sampled: number;
  /** The slot's version when the schedule let the commit run (FENCE bit cleared). */
  readonly atRelease: number;
  /** Whether the fence was set by this release. */
  committed: boolean;
  readonly fault: boolean;
}

/** What a run leaves for the invariants to judge. */
export interface RunRecord {
  readonly events: TurnwardenEvent[];
  readonly logs: LogLine[];
  readonly attempts: CommitAttempt[];
  /** The history rewrite the schedule requested, if any (L8). */
  rewrite: { readonly requestedAfterCommit: boolean; outcome: 'pending' | 'ok' | string } | undefined;
  /** Whether the rewrite's summary row was durable when the scheduled turn went idle. */
  summaryAtIdle: boolean | undefined;
  /** Every release of a parked journal request: whether an abort had committed before it. */
  readonly journalReleases: { readonly afterCommit: boolean }[];
  history: HistoryRow[];
  result: TurnResult | undefined;
  /** The scheduled turn is a decision's resumed turn (issue 26): which decision. */
  decision?: 'approve' | 'deny';
  /** How the decision's call ended: `pending`, `resumed`, or the refusal's code (A4). */
  decided?: string;
  /** The schedule fired the approval wait's timeout (A4). */
  expired?: boolean;
  renewalsAtCommit: number | undefined;
  renewalsAtEnd: number;
  /**
   * The host's force cancel, if the schedule took it: whether the turn's dispatch was still held
   * at its seam then (C7), and how the call ended (`true`, `false` or an error code).
   */
  cancel: { readonly whileDispatchHeld: boolean; outcome: 'pending' | boolean | string } | undefined;
  /**
   * The host's soft close, if the schedule took it: with `waitMs` (waiting) or without, and how
   * it ended (`closed` or an error code); `settled` resolves when it has.
   */
  close:
    | {
        readonly waiting: boolean;
        outcome: 'pending' | 'closed' | string;
        readonly settled: Promise<unknown>;
      }
    | undefined;
  /** The host's next message, sent while the scheduled turn had not ended (S3, C7). */
  next:
    | {
        outcome: 'pending' | 'accepted' | string;
        /** Sent before the host's force cancel (or with none): its claim predates the fence. */
        beforeCancel: boolean;
        /** How many events the host had heard when it sent it. */
        readonly eventsAtSend: number;
        /** M3: it was sent with the double-texting policy `interrupt`. */
        readonly doubleTexting?: 'interrupt';
        /** The generation of its turn, once it started. */
        generation?: number;
      }
    | undefined;
  /**
   * The host's history read and the listener it registered with the read's token (E2): the
   * seqs it read, the seqs announced to the listener after, whether it was told to resync.
   */
  handoff:
    | {
        readonly rows: number[];
        readonly announced: number[];
        resynced: boolean;
        outcome: 'pending' | 'ok' | string;
        readonly settled: Promise<unknown>;
      }
    | undefined;
  /**
   * Listeners the host registered at points the schedule picked (D6), and one registered after
   * the run: what each heard, and whether its registration was refused.
   */
  readonly followers: { readonly heard: TurnwardenEvent[]; refused?: string; readonly late: boolean }[];
  /**
   * The host deleted the workstream at a point the schedule picked, created it again under the
   * same id and ran a turn on the successor (D4): what the successor's listener heard and how
   * its turn ended.
   */
  deletion:
    | {
        outcome: 'pending' | 'ok' | string;
        readonly heard: TurnwardenEvent[];
        successor: TurnResult | undefined;
        readonly settled: Promise<unknown>;
      }
    | undefined;
  /** A plain turn sent after the run completed (the workstream recovered). */
  recovered: boolean | undefined;
  /** The scheduled turn's handle was cancelled after its successor started (C4). */
  staleCancel: boolean;
  stuck: string | undefined;
  /** What the previous run on the same runtime left behind (undefined: a clean start). */
  leaked: string | undefined;
}

export function newRecord(): RunRecord {
  return {
    events: [],
    logs: [],
    attempts: [],
    rewrite: undefined,
    cancel: undefined,
    close: undefined,
    next: undefined,
    handoff: undefined,
    followers: [],
    deletion: undefined,
    summaryAtIdle: undefined,
    journalReleases: [],
    history: [],
    result: undefined,
    renewalsAtCommit: undefined,
    renewalsAtEnd: 0,
    recovered: undefined,
    staleCancel: false,
    stuck: undefined,
    leaked: undefined,
  };
}
