import type { Tool } from '../contracts.js';
import { ToolArgs } from './args.js';

/** `echo {text}` — returns `text` unchanged. */
export const echoTool: Tool = {
  name: 'echo',
  description: 'Returns `text` unchanged. Args: {"text": string}.',
  async run(rawArgs) {
    return ToolArgs.of('echo', rawArgs, ['text']).string('text');
  },
};
