/**
 * C7 — a claim captured before a force cancel cannot start its turn after it. The turn's
 * dispatch is held at its seam (the claim is admitted, the user row durable, the slot armed);
 * the schedule decides whether the host's cancel lands before the dispatch goes, or after it,
 * while the worker runs its tools. The host also sends its next message at any point: its
 * claim is held before it enqueues, and the schedule decides when it reaches the queue and
 * whether it was sent before the cancel (then it must never start) or after (then it may).
 */
import { SeamName } from '@turnwarden/protocol';
import { forceCancel, type Scenario, sendNext } from '../scenario.js';

export const c7: Scenario = {
  id: 'C7',
  title: 'a dispatch whose claim was captured before a force cancel never starts the turn',
  park: [SeamName.claimCaptureToDispatch, SeamName.sendCaptureToEnqueue, SeamName.workerStreamEvent],
  // Text first: a turn that started would stream tokens before it journals anything, so a start
  // after the cancel shows even where the journal would refuse its rows (L3).
  script: JSON.stringify({ script: [{ text: 'looking it up', chunks: 3 }] }),
  actions: [forceCancel, sendNext],
  maxSteps: 8,
  invariants: [
    {
      id: 'no-queued-start-after-cancel',
      guarantee: 'C7',
      check: (r) => {
        const next = r.next;
        if (next === undefined || r.cancel === undefined || !next.beforeCancel) return undefined;
        if (next.outcome === 'accepted') {
          return `a send made before the cancel started turn ${next.generation} after it`;
        }
        return next.outcome === 'SEND_REVOKED' || next.outcome === 'pending'
          ? undefined
          : `a send made before the cancel was refused with ${next.outcome}, not SEND_REVOKED`;
      },
    },
    {
      id: 'no-start-after-cancel',
      guarantee: 'C7',
      check: (r) => {
        if (!r.cancel?.whileDispatchHeld) return undefined;
        const g = r.result?.generation;
        // The claim's own user row is durable (and announced) before the dispatch: not a run.
        const ran = r.events.filter(
          (e) =>
            e.generation === g &&
            (e.type === 'token' ||
              e.type === 'tool_started' ||
              (e.type === 'message' && e.data.message.role !== 'user')),
        );
        const rows = r.history.filter((row) => row.generation === g && row.message.role !== 'user');
        if (ran.length > 0)
          return `the cancelled claim's turn still ran: ${ran.map((e) => e.type).join(', ')}`;
        if (rows.length > 0) return `the cancelled claim's turn wrote ${rows.length} row(s)`;
        return r.result?.status === 'interrupted' && r.result.abortReason === 'cancel'
          ? undefined
          : `the cancelled claim's turn ended ${r.result?.status ?? 'never'} (${r.result?.abortReason ?? 'no reason'})`;
      },
    },
  ],
};
