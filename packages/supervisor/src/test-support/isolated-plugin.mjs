// Thread-isolated test tools: their work runs in the supervisor's shared pool (isolated-task.mjs).
import { isolatedTool } from '@turnwarden/session';

const module = new URL('./isolated-task.mjs', import.meta.url).href;
const any = { type: 'object', additionalProperties: true };

export const tools = [
  isolatedTool({
    name: 'iso_spin',
    description: 'spins forever, no heartbeat',
    parameters: any,
    module,
    exportName: 'spin',
  }),
  isolatedTool({
    name: 'iso_beat',
    description: 'heartbeats for {ms}',
    parameters: any,
    module,
    exportName: 'beat',
  }),
  isolatedTool({
    name: 'iso_where',
    description: 'says which thread ran it',
    parameters: any,
    module,
    exportName: 'where',
  }),
  isolatedTool({ name: 'iso_fail', description: 'throws', parameters: any, module, exportName: 'fail' }),
];
