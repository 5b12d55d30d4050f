/**
 * A session worker's warm-up (warm-up.ts): its synthetic turns run to completion through the
 * machine, the local and the remote model paths and a tool, with nothing stamped or sent out.
 */
import { describe, expect, it } from 'vitest';
import { warmUp } from './warm-up.js';

describe('warm-up', () => {
  it('runs its turns to completion: each model step, the tool call and its journal writes', async () => {
    expect(await warmUp()).toBe(true);
  });
});
