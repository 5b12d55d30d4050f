/**
 * The models and tools a worker can use: exactly what the host's plugin modules export (there
 * are no built-ins; the scripted model and demo tools are the `@turnwarden/session/scripted`
 * plugin). A plugin module is imported inside every worker
 * (functions cannot cross threads) and may export `tools: Tool[]` and `models: ModelProvider[]`.
 */
import { errors, type TurnwardenError } from '@turnwarden/protocol';
import type { ModelProvider, Tool } from './contracts.js';

export interface Registry {
  readonly models: ReadonlyMap<string, ModelProvider>;
  readonly tools: ReadonlyMap<string, Tool>;
  /** Per plugin module, in order: whether it exports tools (a worker that runs no model loads only those). */
  readonly toolModules: readonly boolean[];
}

interface PluginModule {
  readonly tools?: readonly Tool[];
  readonly models?: readonly ModelProvider[];
}

function refuse(field: string, message: string, cause?: unknown): TurnwardenError {
  return errors.invalidConfig(
    `${field} ${message}`,
    { field },
    { ...(cause === undefined ? {} : { cause }) },
  );
}

/** Adds a plugin's entries of one kind: each named, with its function, and a name not yet taken. */
function addAll<T extends { readonly name: string }>(
  into: Map<string, T>,
  entries: readonly T[] | undefined,
  kind: 'tool' | 'model',
  fn: 'run' | 'stream',
  field: string,
  specifier: string,
): void {
  for (const entry of entries ?? []) {
    const e = entry as T & Record<string, unknown>;
    if (typeof e?.name !== 'string' || e.name === '' || typeof e[fn] !== 'function') {
      throw refuse(field, `(${specifier}) exports a ${kind} without a name and a ${fn} function`);
    }
    if (into.has(e.name)) throw refuse(field, `(${specifier}) exports a second ${kind} named ${e.name}`);
    into.set(e.name, entry);
  }
}

/**
 * Loads every plugin module, in order. Refused with INVALID_CONFIG naming
 * `pluginModules[i]`: a module that fails to load, exports neither `tools` nor `models`, exports
 * an entry without a name and a `run` / `stream` function, or reuses a tool or model name (a
 * plugin never silently replaces another plugin's tool).
 */
export async function loadRegistry(pluginModules: readonly string[]): Promise<Registry> {
  const models = new Map<string, ModelProvider>();
  const tools = new Map<string, Tool>();
  const toolModules: boolean[] = [];
  for (const [i, specifier] of pluginModules.entries()) {
    const field = `pluginModules[${i}]`;
    let mod: PluginModule;
    try {
      mod = (await import(specifier)) as PluginModule;
    } catch (e) {
      throw refuse(field, `(${specifier}) failed to load: ${(e as Error).message}`, e);
    }
    if (!Array.isArray(mod.tools) && !Array.isArray(mod.models)) {
      throw refuse(field, `(${specifier}) exports neither a tools nor a models array`);
    }
    addAll(tools, mod.tools, 'tool', 'run', field, specifier);
    addAll(models, mod.models, 'model', 'stream', field, specifier);
    toolModules.push(Array.isArray(mod.tools) && mod.tools.length > 0);
  }
  return { models, tools, toolModules };
}
