/**
 * L3 ⨯ — a turn that cannot unwind stops renewing its lease the moment the abort commits; its
 * worker is terminated after grace, missing results are synthesized, the lease is released and
 * the workstream runs again on a fresh worker. Nothing the dead turn had in flight reaches
 * durable history afterwards.
 *
 * W parks holding a tool result it has not journaled yet (the write "in flight"). The schedule
 * decides whether W sends it before the commit, after it, or never (grace expires and the
 * worker is terminated while parked).
 */
import { SeamName } from '@turnwarden/protocol';
import { advance, expireGrace, type Scenario, wait } from '../scenario.js';
import { TWO_TOOL_CALLS } from './scripts.js';

export const l3: Scenario = {
  id: 'L3',
  title: 'a wedged turn is recovered and nothing it had in flight lands after the commit',
  park: [SeamName.watchdogSampleToCommit, SeamName.workerToolToJournal],
  script: TWO_TOOL_CALLS,
  actions: [advance, expireGrace, wait],
  maxSteps: 14,
};
