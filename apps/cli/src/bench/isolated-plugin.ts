/** A thread-isolated tool for the isolation bench: `iso_spin` wedges its pool thread. */
import { isolatedTool, type Tool } from '@turnwarden/session';

export const tools: Tool[] = [
  isolatedTool({
    name: 'iso_spin',
    description: 'spins forever in a pool thread, no heartbeat',
    module: new URL('./isolated-task.js', import.meta.url).href,
    exportName: 'spin',
  }),
];
