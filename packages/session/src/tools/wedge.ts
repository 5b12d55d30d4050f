import type { Tool } from '../contracts.js';
import { ToolArgs } from './args.js';
import { spinForever } from './hang.js';

/**
 * `wedge {}` — a synchronous infinite loop. It never returns and blocks the worker's thread:
 * only the supervisor terminating the worker ends it.
 */
export const wedgeTool: Tool = {
  name: 'wedge',
  description: 'Blocks its thread forever in a synchronous loop (for watchdog demos). Args: {}.',
  async run(rawArgs) {
    ToolArgs.of('wedge', rawArgs, []);
    return spinForever();
  },
};
