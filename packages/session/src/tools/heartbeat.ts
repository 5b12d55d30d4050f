import type { Tool } from '../contracts.js';
import { ToolArgs } from './args.js';
import { DEFAULT_HEARTBEAT_EVERY_MS, heartbeatFor } from './wait.js';

/**
 * `heartbeat {ms, everyMs?}` — a long tool that stays alive: runs for `ms`, stamping the
 * activity clock every `everyMs` (default 20). Honours the abort signal.
 */
export const heartbeatTool: Tool = {
  name: 'heartbeat',
  description:
    'Runs for `ms` milliseconds (0 to 3600000), reporting progress every `everyMs` (default 20). Args: {"ms": number, "everyMs"?: number}.',
  async run(rawArgs, ctx) {
    const args = ToolArgs.of('heartbeat', rawArgs, ['ms', 'everyMs']);
    const ms = args.duration('ms');
    const everyMs = args.interval('everyMs', DEFAULT_HEARTBEAT_EVERY_MS);
    const beats = await heartbeatFor(ms, everyMs, ctx, 'heartbeat tool');
    return `ran ${ms} ms with ${beats} heartbeats`;
  },
};
