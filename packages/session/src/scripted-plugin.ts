/**
 * `@turnwarden/session/scripted` — the offline scripted model and the demo tools (`sleep`,
 * `heartbeat`, `wedge`, `echo`, `fail`), as a plugin module a host loads only if
 * it asks for them:
 *
 *   Turnwarden.start({ pluginModules: ['@turnwarden/session/scripted'], model: 'scripted' })
 *
 * The demo, the tests, the benchmarks and the interleaving harness load it this way; no worker
 * offers these tools to a model otherwise.
 */
import type { ModelProvider, Tool } from './contracts.js';
import { createScriptedModel } from './scripted/model.js';
import { demoTools } from './tools/demo.js';

export const models: readonly ModelProvider[] = [createScriptedModel()];
export const tools: readonly Tool[] = demoTools();
