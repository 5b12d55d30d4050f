/**
 * A plugin module whose models come from the environment: `TURNWARDEN_MODELS` holds a JSON
 * array of model configurations (`ModelConfig`: name, provider, baseURL, model, apiKeyEnv, …).
 * Add `@turnwarden/providers/from-env` to `pluginModules`; each session worker reads the
 * variable as it loads the module (workers inherit the host's environment), so a host or the
 * CLI configures real models without writing a module. A bad configuration fails the workers'
 * start with INVALID_CONFIG naming `TURNWARDEN_MODELS[i].<field>`.
 */
import { errors } from '@turnwarden/protocol';
import type { ModelProvider } from '@turnwarden/session';
import { modelProvider } from './config.js';

export const ENV_VAR = 'TURNWARDEN_MODELS';

export function modelsFromEnv(env: NodeJS.ProcessEnv = process.env): ModelProvider[] {
  const raw = env[ENV_VAR];
  if (raw === undefined || raw.trim() === '') return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw) as unknown;
  } catch {
    throw errors.invalidConfig(`${ENV_VAR} is not JSON`, { field: ENV_VAR });
  }
  if (!Array.isArray(parsed)) {
    throw errors.invalidConfig(`${ENV_VAR} must be a JSON array of model configurations`, { field: ENV_VAR });
  }
  return parsed.map((c, i) => modelProvider(c, `${ENV_VAR}[${i}]`, env));
}

export const models: ModelProvider[] = modelsFromEnv();
