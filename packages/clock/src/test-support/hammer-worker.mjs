// Worker side of hammer.test.ts: stamps slot 0 as fast as it can; when a stamp reports the
// committed abort, publishes how many stamps succeeded in this round, then waits for the re-arm.
import { workerData } from 'node:worker_threads';
import { SlotStamp } from '../../dist/index.js';

const ctl = new Int32Array(workerData.ctl);
const stamp = new SlotStamp(workerData.clock, 0);
let trues = 0;
let round = 0;
while (Atomics.load(ctl, 0) === 0) {
  if (stamp.touch(3)) {
    trues++;
    continue;
  }
  ctl[1] = trues;
  Atomics.store(ctl, 2, ++round);
  // Wait for the main thread to re-arm for the next round (ctl[3] = rounds armed). Waiting for
  // "not fenced" instead could miss a re-arm immediately followed by the next commit.
  while (Atomics.load(ctl, 3) < round && Atomics.load(ctl, 0) === 0) {}
  trues = 0;
  Atomics.store(ctl, 4, round); // resumed: the next round's stamps race the next commit
}
