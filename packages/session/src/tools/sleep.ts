import type { Tool } from '../contracts.js';
import { ToolArgs } from './args.js';
import { wait } from './wait.js';

/**
 * `sleep {ms, ignoreAbort?}` — waits `ms` without any progress (the watchdog sees a silent
 * turn). Honours the abort signal, unless `ignoreAbort` is true: then it is a promise that
 * ignores the signal until its time is up (a tool that does not cooperate).
 */
export const sleepTool: Tool = {
  name: 'sleep',
  description:
    'Waits `ms` milliseconds (0 to 3600000) without reporting progress. Args: {"ms": number, "ignoreAbort"?: boolean}.',
  async run(rawArgs, ctx) {
    const args = ToolArgs.of('sleep', rawArgs, ['ms', 'ignoreAbort']);
    const ms = args.duration('ms');
    const ignoreAbort = args.boolean('ignoreAbort', false);
    await wait(ms, ignoreAbort ? undefined : ctx.signal, 'sleep tool');
    return `slept ${ms} ms`;
  },
};
