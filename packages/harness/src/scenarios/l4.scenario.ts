/**
 * L4 ⨯ — activity that lands after the watchdog sampled the stall but before the abort commits
 * makes the abort decline: no interruption, no committed-abort log, renewal continues.
 *
 * Threads: W (the turn's worker, parked before each stream event's stamp), S (the watchdog,
 * parked between its stall sample and its commit), A:advance (time passes, one poll). Every
 * order of "W stamps" and "S commits" inside the window is a schedule.
 */
import { SeamName } from '@turnwarden/protocol';
import { advance, type Scenario, wait } from '../scenario.js';

export const l4: Scenario = {
  id: 'L4',
  title: 'activity between the stall sample and the commit declines the abort',
  park: [SeamName.watchdogSampleToCommit, SeamName.workerStreamEvent],
  script: JSON.stringify({ script: [{ text: 'one two three', chunks: 3 }] }),
  actions: [advance, wait],
  maxSteps: 14,
};
