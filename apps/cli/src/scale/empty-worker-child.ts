/**
 * The scale bench's reference for rss per active session, forked by run.ts with --expose-gc:
 * `count` empty `Worker`s (`{ eval: true }`, code that only waits), measured as the runtime's
 * sessions are — process rss while they are up minus rss before them, ÷ count. What any design
 * that keeps one thread per active session pays at the least.
 */
import { Worker } from 'node:worker_threads';
import { reportToParent } from '../bench/child.js';
import { median } from '../bench/stats.js';
import { gcExposed, settledRss, sleep } from './measure.js';
import type { EmptyWorkerConfig, EmptyWorkerReport } from './types.js';

const WAITING = `
const { parentPort } = require('node:worker_threads');
parentPort.postMessage('up');
setInterval(() => {}, 1 << 30);
`;

async function measure(cfg: EmptyWorkerConfig): Promise<EmptyWorkerReport> {
  const rssBefore = await settledRss();
  const workers: Worker[] = [];
  try {
    const up: Promise<void>[] = [];
    for (let i = 0; i < cfg.count; i++) {
      const w = new Worker(WAITING, { eval: true });
      workers.push(w);
      up.push(
        new Promise((resolve, reject) => {
          w.once('message', () => resolve());
          w.once('error', reject);
        }),
      );
    }
    await Promise.all(up);
    // As in the runtime's window: rss sampled while they wait, no forced collection.
    const samples: number[] = [];
    for (let i = 0; i < 8; i++) {
      await sleep(250);
      samples.push(process.memoryUsage.rss());
    }
    const rssSteady = median(samples);
    return {
      count: cfg.count,
      rssBefore,
      rssSteady,
      perWorker: (rssSteady - rssBefore) / cfg.count,
      gcExposed,
    };
  } finally {
    await Promise.allSettled(workers.map((w) => w.terminate()));
  }
}

const cfg = JSON.parse(process.argv[2] ?? '{"count":50}') as EmptyWorkerConfig;
await reportToParent(() => measure(cfg));
process.exit(0);
