import { SeamName } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import { explore, runSchedule } from './explore.js';
import { advance, expireGrace, type Scenario, wait } from './scenario.js';
import { RandomScheduler } from './schedulers.js';

/** The README's recipe: a host's own tool under the harness. */
const hostTool: Scenario = {
  id: 'L3',
  title: "a host tool's result never lands after the abort commits",
  park: [SeamName.watchdogSampleToCommit, SeamName.workerToolToJournal],
  pluginModules: [new URL('./test-support/host-tools.mjs', import.meta.url).href],
  script: JSON.stringify({
    script: [{ tools: [{ name: 'charge_card', args: { cents: 1250 } }] }, { text: 'paid' }],
  }),
  actions: [advance, expireGrace, wait],
  maxSteps: 12,
};

describe('a host-written scenario', () => {
  it('L3: runs the host tool inside the workers and holds every invariant', async () => {
    const report = await explore({
      scenarios: [hostTool],
      schedulers: ['random', 'pct'],
      seedsPerScenario: 3,
    });
    expect(report.violations).toEqual([]);
    const completed = await runSchedule(hostTool, new RandomScheduler(99), { seed: 99 });
    const results = completed.record.history
      .filter((r) => r.message.role === 'tool')
      .map((r) => r.message.content);
    expect(results.length).toBe(1);
    expect(results[0]).toMatch(/receipt for 1250 cents|did not complete/);
  }, 60_000);
});
