/**
 * L12: session workers run below the supervisor's thread, so turns that spin on every core cannot
 * take the watchdog's CPU; the few shared model threads run `models.nice` below it (default 0). Linux only: there a thread's priority is its own.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { getPriority } from 'node:os';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Turnwarden } from '../runtime.js';
import { SCRIPTED } from '../test-support/runtime.js';

const SCRIPTED_MODEL = { pluginModules: [SCRIPTED], model: 'scripted' } as const;

/** The nice value of every thread of this process (field 19 of /proc/<pid>/task/<tid>/stat). */
function threadNices(): number[] {
  return readdirSync('/proc/self/task').flatMap((tid) => {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      return [Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])];
    } catch {
      return []; // the thread exited meanwhile
    }
  });
}

describe.runIf(process.platform === 'linux')('worker priority', () => {
  const logger = pino({ level: 'silent' });

  it('L12: every session worker thread runs pool.workerNice below the supervisor, which keeps its own priority; the model threads run models.nice below it', async () => {
    const base = getPriority();
    const lowered = Math.min(19, base + 10);
    const before = threadNices().filter((n) => n === lowered).length;
    const tw = await Turnwarden.start({
      ...SCRIPTED_MODEL,
      logger,
      pool: { maxWorkers: 3, warmWorkers: 3 },
      models: { threads: 2, nice: 5 },
    });
    try {
      expect(tw.config.pool.workerNice).toBe(10);
      expect(threadNices().filter((n) => n === lowered).length - before).toBe(3);
      expect(threadNices().filter((n) => n === Math.min(19, base + 5)).length).toBe(2);
      expect(getPriority()).toBe(base); // the supervisor's thread (and the process) are untouched
    } finally {
      await tw.shutdown();
    }
  });

  it('L12: workerNice 0 leaves the workers at the supervisor’s priority', async () => {
    const base = getPriority();
    const tw = await Turnwarden.start({
      ...SCRIPTED_MODEL,
      logger,
      pool: { maxWorkers: 2, warmWorkers: 2, workerNice: 0 },
    });
    try {
      expect(threadNices().filter((n) => n !== base)).toEqual([]);
    } finally {
      await tw.shutdown();
    }
  });

  it('T5: workerNice outside 0..19 is refused at start with INVALID_CONFIG naming the field', async () => {
    for (const workerNice of [-1, 20, 1.5]) {
      await expect(
        Turnwarden.start({ ...SCRIPTED_MODEL, logger, pool: { workerNice } }),
      ).rejects.toMatchObject({
        code: 'INVALID_CONFIG',
        details: { field: 'pool.workerNice' },
      });
    }
  });
});
