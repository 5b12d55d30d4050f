/**
 * @turnwarden/protocol/mutations — the harness's mutation switches. Not loaded by the code a host
 * runs: only the supervisor's variants of its parts (packages/supervisor/src/mutants.ts) read
 * them, and its production build (packages/supervisor/scripts/build.mjs) leaves the variants out
 * and fails if any other file imports this module; only its harness build
 * (`@turnwarden/supervisor/harness`, never published) has them.
 */
import { attachedSeamController } from './seams.js';

/**
 * Deliberate breakages of a mechanism, switched on only through an attached harness, so a
 * test can show that the harness finds the bug the mechanism prevents.
 */
export const Mutation = {
  /** The abort commit ignores activity since the sample (breaks L4/L6). */
  commitIgnoresActivity: 'commit-ignores-activity',
  /** The definitive abort log is written before the commit decides (breaks L5). */
  publishBeforeCommit: 'publish-before-commit',
  /** Lease renewal continues after the abort committed (breaks L3). */
  renewAfterAbort: 'renew-after-abort',
  /** The journal admits rows from a turn whose abort committed (breaks L3). */
  admitFencedJournal: 'admit-fenced-journal',
  /** A failure before the commit still commits the abort (breaks L7). */
  commitOnPublishFailure: 'commit-on-publish-failure',
  /** Missing tool results are not synthesized after an abort (breaks S1/S2). */
  skipRepair: 'skip-repair',
  /** A history rewrite is admitted after the turn's abort committed (breaks L8). */
  rewriteIgnoresAbort: 'rewrite-ignores-abort',
  /** The turn settles without waiting for a history rewrite in flight (breaks L8). */
  abortTearsRewrite: 'abort-tears-rewrite',
  /** A send's claim is not checked against later cancels, closes or poisons (breaks C7). */
  claimIgnoresFence: 'claim-ignores-fence',
  /** A handoff listener is told again of rows its history read returned (breaks E2). */
  handoffRowsTwice: 'handoff-rows-twice',
  /** A listener registering after the close is kept instead of closed at once (breaks D6). */
  lateListenerKept: 'late-listener-kept',
  /** A workstream created again under an id inherits its predecessor's event stream (breaks D4). */
  successorSharesStream: 'successor-shares-stream',
} as const;
export type Mutation = (typeof Mutation)[keyof typeof Mutation];

/** True only while an attached harness switched this mutation on. */
export function mutated(m: Mutation): boolean {
  return attachedSeamController()?.mutations.has(m) === true;
}
