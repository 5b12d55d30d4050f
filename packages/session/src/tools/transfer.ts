import type { Tool } from '../contracts.js';
import { ToolArgs } from './args.js';

/**
 * `transfer {to, amount}` — a pretend money transfer that needs a person's approval before it
 * runs (`needsApproval`): the turn waits, holding no thread, until `approve` or `deny` (issue 26).
 */
export const transferTool: Tool = {
  name: 'transfer',
  description:
    'Transfers `amount` to the account `to` (pretend; needs approval). Args: {"to": string, "amount": number}.',
  parameters: {
    type: 'object',
    properties: {
      to: { type: 'string', description: 'the account to pay' },
      amount: { type: 'number', description: 'how much' },
    },
    required: ['to', 'amount'],
    additionalProperties: false,
  },
  needsApproval: true,
  async run(rawArgs) {
    const args = ToolArgs.of('transfer', rawArgs, ['to', 'amount']);
    return `transferred ${args.number('amount')} to ${args.string('to')}`;
  },
};
