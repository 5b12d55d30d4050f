/**
 * L7 — fail-closed: if publishing the abort throws anywhere, nothing is published, the watchdog
 * keeps sampling and the lease keeps renewing. Every release of the watchdog's commit seam
 * throws; whatever the interleaving, no abort may commit and the turn completes.
 */
import { SeamName } from '@turnwarden/protocol';
import { advance, type Scenario, wait } from '../scenario.js';

export const l7: Scenario = {
  id: 'L7',
  title: 'a publish that throws declines the abort; sampling and renewal go on',
  park: [SeamName.watchdogSampleToCommit, SeamName.workerStreamEvent],
  script: JSON.stringify({ script: [{ text: 'still working', chunks: 2 }] }),
  actions: [advance, wait],
  fault: (parked) =>
    parked.seam === SeamName.watchdogSampleToCommit
      ? { kind: 'throw', message: 'synthetic abort publication failure' }
      : undefined,
  maxSteps: 12,
  invariants: [
    {
      id: 'turn-completes',
      guarantee: 'L7',
      check: (r) =>
        r.result?.status === 'completed'
          ? undefined
          : `the turn ended ${r.result?.status ?? 'never'}, not completed`,
    },
  ],
};
