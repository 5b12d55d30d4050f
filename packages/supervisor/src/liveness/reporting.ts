/**
 * What operators and users read about aborts: stable log messages (grep them) and the
 * user-visible warnings, in their two stages (L5): observational — the watchdog fired and may
 * still decline — and definitive — the abort committed.
 */
import type { AbortReason, TurnOutcome } from '@turnwarden/protocol';
import type { StallInfo } from './watchdog.js';

export const LogMessage = {
  fired: 'turn liveness watchdog fired; attempting recovery',
  aborted: 'watchdog aborted turn; lease renewal stopped',
  abortedOther: 'turn aborted; lease renewal stopped',
  declined: 'watchdog abort declined',
  starved: 'watchdog abort deferred: turn starved of CPU; still watching',
  declinedFailed: 'watchdog abort declined: publish failed; still watching',
  graceExpired: 'turn did not unwind within grace; terminating worker',
  workerDied: 'session worker died mid-turn',
  synthesized: 'tool results synthesized',
  cleanupFailed: 'tool cleanup failed; workstream refuses claims until repaired',
  leaseLost: 'turn lease lost; aborting turn',
  dispatchWaitsForFence: 'turn dispatch waits for a cancel, close or delete called after its send',
  notDispatched: 'turn aborted before its dispatch: not sent to its worker',
} as const;

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)}s`;

export function observationalWarning(info: StallInfo, turnDeadlineMs: number | undefined): string {
  if (info.bound === 'deadline')
    return `The turn exceeded its deadline of ${turnDeadlineMs} ms; attempting recovery.`;
  if (info.bound === 'dispatch') {
    return `The turn was not started by a worker within ${seconds(info.idleMs)}; attempting recovery.`;
  }
  return `No progress for ${seconds(info.idleMs)} (last: ${info.lastActivity}); attempting recovery.`;
}

export function definitiveWarning(reason: 'watchdog' | 'deadline' | 'dispatch', idleMs: number): string {
  if (reason === 'deadline')
    return 'Turn aborted by the liveness watchdog: it exceeded its deadline. You can retry.';
  if (reason === 'dispatch') {
    return `Turn aborted by the liveness watchdog: no worker started it within ${seconds(idleMs)}. You can retry.`;
  }
  return `Turn aborted by the liveness watchdog after ${seconds(idleMs)} without progress. You can retry.`;
}

/** Why a turn's tool calls did not complete, for the synthesized results (S2). */
export function describeAbort(
  reason: AbortReason | 'crash' | undefined,
  outcome: TurnOutcome | undefined,
): string {
  switch (reason) {
    case 'watchdog':
      return 'aborted by the liveness watchdog';
    case 'deadline':
      return 'aborted at its deadline';
    case 'dispatch':
      return 'aborted before its worker started it';
    case 'cancel':
      return 'cancelled';
    case 'shutdown':
      return 'interrupted by shutdown';
    case 'lease_lost':
      return 'aborted because its lease was lost';
    case 'workstream_gone':
      return 'aborted because its workstream was deleted';
    case 'crash':
      return 'interrupted by a worker crash';
    default:
      return outcome?.error ? `failed (${outcome.error.code})` : 'interrupted';
  }
}
