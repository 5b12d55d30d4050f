import { errors } from '@turnwarden/protocol';
import type { Tool } from '../contracts.js';
import { ToolArgs } from './args.js';

/** `fail {message}` — throws TurnwardenError(TOOL_ERROR, message): a tool that reports an error. */
export const failTool: Tool = {
  name: 'fail',
  description: 'Fails with `message` as its error. Args: {"message": string}.',
  async run(rawArgs) {
    const message = ToolArgs.of('fail', rawArgs, ['message']).string('message');
    throw errors.toolError(message, { tool: 'fail' });
  },
};
