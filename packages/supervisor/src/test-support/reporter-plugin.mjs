// A host's own plugin: a model that answers with the names of the tools it was offered, one tool,
// and a checkInput that refuses the message "forbidden" (as a provider refuses what it cannot take).
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';

export const models = [
  {
    name: 'reporter',
    async *stream(req) {
      yield { type: 'text', text: `tools: ${req.tools.map((t) => t.name).join(',') || 'none'}` };
    },
    checkInput(content) {
      if (content === 'forbidden') {
        throw new TurnwardenError(ErrorCode.INVALID_INPUT, 'reporter refuses this message', {
          details: { field: 'content' },
        });
      }
    },
  },
];

export const tools = [{ name: 'lookup', description: 'looks something up', run: async () => 'found' }];
