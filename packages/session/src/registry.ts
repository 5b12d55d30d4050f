/**
 * The models and tools a worker can use: the built-in scripted model and demo tools, plus
 * whatever the host's plugin modules export. A plugin module is imported inside every worker
 * (functions cannot cross threads) and may export `tools: Tool[]` and `models: ModelProvider[]`.
 */
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';
import type { ModelProvider, Tool } from './contracts.js';
import { createScriptedModel } from './scripted/model.js';
import { demoTools } from './tools/index.js';

export interface Registry {
  readonly models: ReadonlyMap<string, ModelProvider>;
  readonly tools: ReadonlyMap<string, Tool>;
}

interface PluginModule {
  readonly tools?: readonly Tool[];
  readonly models?: readonly ModelProvider[];
}

export async function loadRegistry(pluginModules: readonly string[]): Promise<Registry> {
  const models = new Map<string, ModelProvider>();
  const tools = new Map<string, Tool>();
  const scripted = createScriptedModel();
  models.set(scripted.name, scripted);
  for (const tool of demoTools()) tools.set(tool.name, tool);
  for (const specifier of pluginModules) {
    let mod: PluginModule;
    try {
      mod = (await import(specifier)) as PluginModule;
    } catch (e) {
      throw new TurnwardenError(ErrorCode.INVALID_CONFIG, `plugin module ${specifier} failed to load`, {
        cause: e,
      });
    }
    for (const tool of mod.tools ?? []) tools.set(tool.name, tool);
    for (const model of mod.models ?? []) models.set(model.name, model);
  }
  return { models, tools };
}
