/**
 * The interleaving harness's variants of the parts — harness build only: scripts/build.mjs
 * leaves this file out of dist/, and fails if any other file reaches the switches. Each variant
 * breaks one mechanism while the attached harness has its switch on (`turnwarden stress
 * --mutation NAME`, `Mutation` in @turnwarden/protocol/mutations), so the harness can show it
 * finds the bug the mechanism prevents; switched off, it behaves as its part. src/harness.ts
 * installs them where the parts are named through `variant(…)` (variants.ts).
 */
import type { JournalRequest } from '@turnwarden/protocol';
import { Mutation, mutated } from '@turnwarden/protocol/mutations';
import { type FenceReason, type SendClaim, SendQueue } from './commands/send-queue.js';
import { JournalGate } from './journal/journal-gate.js';
import { AbortProtocol } from './liveness/abort-protocol.js';
import { LogMessage } from './liveness/reporting.js';
import { type StallInfo, Watchdog, type WatchedTurn } from './liveness/watchdog.js';
import { EventHub, type Listener, type TurnwardenEvent } from './streams/events.js';
import { LeaseRenewal } from './turn/renewal.js';
import { type RepairInput, repairOpenCalls } from './turn/repair.js';
import { admitRewrite, rewritesInFlight } from './turn/rewrite.js';
import type { Turn } from './turn/turn.js';
import { installVariant } from './variants.js';

class MutantAbortProtocol extends AbortProtocol {
  /** publish-before-commit (breaks L5): the definitive abort log is written before the commit decides. */
  override fired(w: WatchedTurn, info: StallInfo): void {
    super.fired(w, info);
    if (mutated(Mutation.publishBeforeCommit)) {
      (this.host.turnOnSlot(w.slot)?.log ?? this.host.logger).error(
        { idleMs: info.idleMs },
        LogMessage.aborted,
      );
    }
  }
}

class MutantLeaseRenewal extends LeaseRenewal {
  /** renew-after-abort (breaks L3): the lease is renewed after the abort committed, until the turn ends … */
  protected override renewing(): boolean {
    return mutated(Mutation.renewAfterAbort) ? !this.turn.ending : super.renewing();
  }

  /** … and the commit does not stop the renewal (the turn's end still does). */
  override aborted(): void {
    if (!mutated(Mutation.renewAfterAbort)) super.aborted();
  }
}

class MutantWatchdog extends Watchdog {
  /** commit-ignores-activity (breaks L4/L6): every bound fences as the deadline does, ignoring activity. */
  protected override fence(turn: WatchedTurn, sampled: number, info: StallInfo): boolean {
    return mutated(Mutation.commitIgnoresActivity)
      ? this.clock.fence(turn.slot)
      : super.fence(turn, sampled, info);
  }

  /** commit-on-publish-failure (breaks L7): a failure before the commit still commits the abort. */
  protected override failClosed(turn: WatchedTurn, info: StallInfo, err: unknown): void {
    if (mutated(Mutation.commitOnPublishFailure)) this.commit(turn, info.sampledVersion, info);
    else super.failClosed(turn, info, err);
  }
}

class MutantJournalGate extends JournalGate {
  /** admit-fenced-journal (breaks L3): rows of a turn whose abort committed are admitted. */
  protected override live(req: Omit<JournalRequest, 'eventsPosted'>): boolean {
    return mutated(Mutation.admitFencedJournal) || super.live(req);
  }
}

class MutantSendQueue extends SendQueue {
  /** claim-ignores-fence (breaks C7): a fence revokes no waiting send … */
  protected override revokeBefore(workstreamId: string, ticket: number, reason: FenceReason): number {
    return mutated(Mutation.claimIgnoresFence) ? 0 : super.revokeBefore(workstreamId, ticket, reason);
  }

  /** … and no claim is checked against it. */
  override fencedSince(claim: SendClaim): FenceReason | undefined {
    return mutated(Mutation.claimIgnoresFence) ? undefined : super.fencedSince(claim);
  }
}

class MutantEventHub extends EventHub {
  /** handoff-rows-twice (breaks E2): a handoff listener is told again of rows its history read returned. */
  protected override withoutRowsRead(listener: Listener, lastSeq: number): Listener {
    return mutated(Mutation.handoffRowsTwice) ? listener : super.withoutRowsRead(listener, lastSeq);
  }

  /** late-listener-kept (breaks D6): a listener registering after the close is kept, not closed. */
  override closeLate(
    listener: Listener,
    notice: () => TurnwardenEvent | undefined,
    off?: () => void,
  ): boolean {
    return mutated(Mutation.lateListenerKept) ? false : super.closeLate(listener, notice, off);
  }

  /** successor-shares-stream (breaks D4): a workstream created again inherits its predecessor's stream. */
  override reopen(workstreamId: string): void {
    if (!mutated(Mutation.successorSharesStream)) super.reopen(workstreamId);
  }
}

/** Installs every variant (src/harness.ts, when the harness build's entry loads). */
export function installMutants(): void {
  installVariant(AbortProtocol, MutantAbortProtocol);
  installVariant(LeaseRenewal, MutantLeaseRenewal);
  installVariant(Watchdog, MutantWatchdog);
  installVariant(JournalGate, MutantJournalGate);
  installVariant(SendQueue, MutantSendQueue);
  installVariant(EventHub, MutantEventHub);
  // skip-repair (breaks S1/S2): missing tool results are not synthesized after an abort.
  installVariant(repairOpenCalls, (input: RepairInput) =>
    mutated(Mutation.skipRepair) ? Promise.resolve(0) : repairOpenCalls(input),
  );
  // rewrite-ignores-abort (breaks L8): a rewrite is admitted after the turn's abort committed.
  installVariant(admitRewrite, (turn: Turn) => {
    if (!mutated(Mutation.rewriteIgnoresAbort)) admitRewrite(turn);
  });
  // abort-tears-rewrite (breaks L8): the turn settles without waiting for a rewrite in flight.
  installVariant(rewritesInFlight, (turn: Turn) =>
    mutated(Mutation.abortTearsRewrite) ? [] : rewritesInFlight(turn),
  );
}
