import type { SeamFault, SeamName } from '@turnwarden/protocol';
import type { Parked } from './controller.js';
import type { Invariant } from './invariants.js';
import type { Run } from './run.js';

/** A main-thread step the schedule can take (it becomes the label `A:<name>`). */
export interface Action {
  readonly name: string;
  enabled(run: Run): boolean;
  run(run: Run): void | Promise<void>;
}

/**
 * A crossing to explore: one turn on a fresh runtime, the seams its threads park at, the
 * actions a schedule may interleave, and the invariants every run must satisfy (on top of
 * the common ones). The `id` names the guarantee (the coverage tool reads it).
 */
export interface Scenario {
  readonly id: string;
  readonly title: string;
  readonly park: readonly SeamName[];
  /** Modules every worker imports (the host's own tools and models). */
  readonly pluginModules?: readonly string[];
  /** Messages whose turns run to completion, unscheduled, before the scheduled turn. */
  readonly prelude?: readonly string[];
  /** The user message that starts the turn (a scripted-model script). */
  readonly script: string;
  /**
   * The scheduled turn is not a send's but a decision's (issue 26): the prelude's last turn ends
   * waiting for an approval, and the run approves or denies it — the resumed turn is scheduled.
   */
  readonly resume?: 'approve' | 'deny';
  readonly actions: readonly Action[];
  /** A fault to inject when the schedule releases a parked thread (e.g. L7: the publish throws). */
  fault?(parked: Parked): SeamFault | undefined;
  /** Most schedule decisions per run (PCT's k). */
  readonly maxSteps: number;
  readonly invariants?: readonly Invariant[];
}

/** Moves the shared monotonic time past the stall bound and runs one watchdog pass. */
export const advance: Action = {
  name: 'advance',
  enabled: (run) =>
    !run.turnDone && !run.harness.isParked('S') && !run.committed && run.record.attempts.length < 3,
  run: (run) => run.advance(),
};

/** The grace period ends: a turn that has not unwound loses its worker (L3). */
export const expireGrace: Action = {
  name: 'grace',
  enabled: (run) => run.committed && !run.turnDone,
  run: (run) => run.gracePeriod(),
};

/** The host force-cancels the turn, once, at any point of the schedule (C3, C7). */
export const forceCancel: Action = {
  name: 'cancel',
  enabled: (run) => !run.turnDone && run.record.cancel === undefined,
  run: (run) => run.cancel(),
};

/** The host sends its next message while the turn has not ended: it must be refused (S3). */
export const sendNext: Action = {
  name: 'send',
  enabled: (run) => !run.turnDone && run.record.next === undefined,
  run: (run) => run.sendNext(),
};

/** The approval wait's timeout fires at a point the schedule picks (A4). */
export const expireApproval: Action = {
  name: 'expire',
  enabled: (run) => !run.turnDone && run.record.expired === undefined,
  run: (run) => run.expireApproval(),
};

/** The host double-texts with `interrupt` while the turn has not ended (M3): it ends the turn and runs next. */
export const interruptNext: Action = {
  name: 'interrupt',
  enabled: (run) => !run.turnDone && run.record.next === undefined,
  run: (run) => run.sendNext('interrupt'),
};

/** The host closes the workstream without waiting: refused while the turn runs (C1). */
export const closeNow: Action = {
  name: 'close',
  enabled: (run) => !run.turnDone && run.record.close === undefined,
  run: (run) => run.softClose(false),
};

/** The host closes the workstream waiting for the turn to end (C1). */
export const closeWaiting: Action = {
  name: 'close-wait',
  enabled: (run) => !run.turnDone && run.record.close === undefined,
  run: (run) => run.softClose(true),
};

/** The host deletes the workstream and creates it again under the same id (D4). */
export const deleteAndRecreate: Action = {
  name: 'delete',
  enabled: (run) => !run.turnDone && run.record.deletion === undefined,
  run: (run) => run.deleteAndRecreate(),
};

/** A listener registers at a point the schedule picks (D6); two may. */
export const follow: Action = {
  name: 'follow',
  enabled: (run) => run.record.followers.length < 2,
  run: (run) => {
    void run.follow();
  },
};

/** The host reads the history and follows the stream from the read's token (E2). */
export const readAndFollow: Action = {
  name: 'read-follow',
  enabled: (run) => !run.turnDone && run.record.handoff === undefined,
  run: (run) => run.readAndFollow(),
};

/** The host rewrites history (compaction of the prelude) while the turn runs (L8). */
export const compactHistory: Action = {
  name: 'compact',
  enabled: (run) => !run.turnDone && run.record.rewrite === undefined,
  run: (run) => run.compact(),
};

/** A lease renewal period passes (renewal runs, or must not if the abort committed). */
export const wait: Action = {
  name: 'wait',
  enabled: (run) => !run.turnDone && run.waits < 2,
  run: (run) => run.renewalPeriod(),
};
