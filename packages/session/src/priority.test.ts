import { existsSync } from 'node:fs';
import { getPriority } from 'node:os';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { lowerThreadPriority, osThreadId } from './priority.js';

describe('lowerThreadPriority', () => {
  it('does nothing off Linux (it would lower the whole process) or when asked for nothing', () => {
    const before = getPriority();
    expect(lowerThreadPriority(10, 'darwin')).toBeUndefined();
    expect(lowerThreadPriority(0, 'linux')).toBeUndefined();
    expect(getPriority()).toBe(before);
  });

  it.runIf(process.platform === 'linux')('lowers the calling thread only, capped at 19', async () => {
    const base = getPriority();
    // The built module (workers load dist; setup builds it before the tests run).
    const url = new URL('../dist/priority.js', import.meta.url).href;
    // A worker lowers itself, reports its own priority and the cap, and the caller is untouched.
    const code = `
      const { parentPort } = require('node:worker_threads');
      const { getPriority } = require('node:os');
      import(${JSON.stringify(url)}).then(({ lowerThreadPriority }) => {
        const first = lowerThreadPriority(5);
        const capped = lowerThreadPriority(30);
        parentPort.postMessage({ first, capped, now: getPriority() });
      });`;
    const w = new Worker(code, { eval: true });
    const seen = await new Promise((resolve, reject) => {
      w.once('message', resolve);
      w.once('error', reject);
    });
    await w.terminate();
    expect(seen).toEqual({ first: Math.min(19, base + 5), capped: 19, now: 19 });
    expect(getPriority()).toBe(base);
  });
});

describe('osThreadId', () => {
  it('is undefined off Linux', () => {
    expect(osThreadId('darwin')).toBeUndefined();
    expect(osThreadId('win32')).toBeUndefined();
  });

  it.runIf(process.platform === 'linux')(
    'is the calling thread’s own: the main thread’s is the pid, a worker’s is another thread of the process',
    async () => {
      expect(osThreadId()).toBe(process.pid);
      const url = new URL('../dist/priority.js', import.meta.url).href;
      const code = `
      const { parentPort } = require('node:worker_threads');
      // Listening keeps the thread alive until terminated: its task entry is looked at after.
      parentPort.on('message', () => {});
      import(${JSON.stringify(url)}).then(({ osThreadId }) => parentPort.postMessage(osThreadId()));`;
      const w = new Worker(code, { eval: true });
      const tid = await new Promise<number>((resolve, reject) => {
        w.once('message', resolve);
        w.once('error', reject);
      });
      expect(tid).not.toBe(process.pid);
      expect(existsSync(`/proc/self/task/${tid}`)).toBe(true);
      await w.terminate();
    },
  );
});
