/**
 * L6 ⨯ — the abort commit is one atomic step that checks the sampled generation and publishes
 * the abort; every stamp is ordered before it (the abort declines) or after it (the abort
 * stands and the stamp cannot revive the turn).
 *
 * On top of L4's window, S also parks after the commit and before the abort message is posted,
 * so the worker can stamp after the commit while it has not been told: the fence alone must
 * stop it.
 */
import { SeamName } from '@turnwarden/protocol';
import { advance, expireGrace, type Scenario } from '../scenario.js';

export const l6: Scenario = {
  id: 'L6',
  title: 'stamps are totally ordered with the abort commit; a stamp after it cannot revive the turn',
  park: [SeamName.watchdogSampleToCommit, SeamName.watchdogCommitToPublish, SeamName.workerStreamEvent],
  script: JSON.stringify({ script: [{ text: 'a b c d', chunks: 4 }] }),
  actions: [advance, expireGrace],
  maxSteps: 16,
};
