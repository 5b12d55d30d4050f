import type { Tool } from '../contracts.js';
import { ToolArgs } from './args.js';

/** `echo {text}` — returns `text` unchanged. */
export const echoTool: Tool = {
  name: 'echo',
  description: 'Returns `text` unchanged. Args: {"text": string}.',
  parameters: {
    type: 'object',
    properties: { text: { type: 'string', description: 'the text to return' } },
    required: ['text'],
    additionalProperties: false,
  },
  async run(rawArgs) {
    return ToolArgs.of('echo', rawArgs, ['text']).string('text');
  },
};
