/**
 * Named models: which provider, where, which model id, and the environment variable that holds
 * the key. The key is read when the provider is made and never logged, nor put in an error: a
 * missing one is named by its variable.
 */
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { errors, TurnwardenError } from '@turnwarden/protocol';
import type { ModelProvider } from '@turnwarden/session';
import { type DriveOptions, driveModel } from './drive.js';
import { useChunkCheck } from './openai-chunks.js';
import { leanStreaming } from './openai-stream.js';

export interface ModelConfig extends Omit<DriveOptions, 'name' | 'provider' | 'secrets'> {
  /** The name turns select it by (`config.model`). */
  readonly name: string;
  readonly provider: 'openai-compatible' | 'anthropic';
  /**
   * The API's base URL: required for `openai-compatible` (`http://localhost:11434/v1` for Ollama,
   * `https://api.openai.com/v1`); Anthropic's default when absent.
   */
  readonly baseURL?: string;
  /** The provider's model id (`llama3.1`, `gpt-4o-mini`, `claude-sonnet-4-5`). */
  readonly model: string;
  /** The environment variable holding the API key (absent: no key, as a local server takes). */
  readonly apiKeyEnv?: string;
  /** Extra request headers (not for keys: use `apiKeyEnv`). */
  readonly headers?: Readonly<Record<string, string>>;
}

const FIELDS = [
  'name',
  'provider',
  'baseURL',
  'model',
  'apiKeyEnv',
  'headers',
  'maxRetries',
  'baseDelayMs',
  'maxDelayMs',
  'maxOutputTokens',
  'temperature',
] as const;

function bad(field: string, message: string): TurnwardenError {
  return errors.invalidConfig(`${field} ${message}`, { field });
}

function text(value: unknown, field: string): string {
  if (typeof value !== 'string' || value.trim() === '') throw bad(field, 'must be a non-empty string');
  return value;
}

function int(value: unknown, field: string, min: number, max: number): void {
  if (
    value !== undefined &&
    (!Number.isSafeInteger(value) || (value as number) < min || (value as number) > max)
  ) {
    throw bad(field, `must be an integer in ${min}..${max}`);
  }
}

/** Checks a model configuration; refusals are INVALID_CONFIG naming `<at>.<field>`. */
export function checkModelConfig(value: unknown, at = 'model'): ModelConfig {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw bad(at, 'must be an object');
  const c = value as Record<string, unknown>;
  for (const key of Object.keys(c)) {
    if (!(FIELDS as readonly string[]).includes(key)) throw bad(`${at}.${key}`, 'is not a known setting');
  }
  text(c.name, `${at}.name`);
  text(c.model, `${at}.model`);
  if (c.provider !== 'openai-compatible' && c.provider !== 'anthropic') {
    throw bad(`${at}.provider`, "must be 'openai-compatible' or 'anthropic'");
  }
  if (c.baseURL !== undefined || c.provider === 'openai-compatible') {
    let url: URL;
    try {
      url = new URL(text(c.baseURL, `${at}.baseURL`));
    } catch (e) {
      if (e instanceof TurnwardenError) throw e;
      throw bad(`${at}.baseURL`, 'must be an http(s) URL');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw bad(`${at}.baseURL`, 'must be an http(s) URL');
  }
  if (c.apiKeyEnv !== undefined && !/^[A-Za-z_][A-Za-z0-9_]*$/.test(text(c.apiKeyEnv, `${at}.apiKeyEnv`))) {
    throw bad(`${at}.apiKeyEnv`, 'must name an environment variable');
  }
  if (c.headers !== undefined) {
    if (typeof c.headers !== 'object' || c.headers === null || Array.isArray(c.headers)) {
      throw bad(`${at}.headers`, 'must be an object of strings');
    }
    for (const [k, v] of Object.entries(c.headers)) {
      if (typeof v !== 'string') throw bad(`${at}.headers.${k}`, 'must be a string');
      if (/^(authorization|x-api-key|api-key)$/i.test(k)) {
        throw bad(`${at}.headers.${k}`, 'must not carry a key: name its variable in apiKeyEnv');
      }
    }
  }
  int(c.maxRetries, `${at}.maxRetries`, 0, 20);
  int(c.baseDelayMs, `${at}.baseDelayMs`, 1, 600_000);
  int(c.maxDelayMs, `${at}.maxDelayMs`, 1, 600_000);
  int(c.maxOutputTokens, `${at}.maxOutputTokens`, 1, 10_000_000);
  if (
    c.temperature !== undefined &&
    (typeof c.temperature !== 'number' || c.temperature < 0 || c.temperature > 2)
  ) {
    throw bad(`${at}.temperature`, 'must be a number in 0..2');
  }
  return c as unknown as ModelConfig;
}

function apiKey(c: ModelConfig, at: string, env: NodeJS.ProcessEnv): string | undefined {
  if (c.apiKeyEnv === undefined) return undefined;
  const key = env[c.apiKeyEnv];
  if (key === undefined || key === '') throw bad(`${at}.apiKeyEnv`, `names ${c.apiKeyEnv}, which is not set`);
  return key;
}

/** The model provider a configuration names (checked first; see `checkModelConfig`). */
export function modelProvider(
  value: unknown,
  at = 'model',
  env: NodeJS.ProcessEnv = process.env,
): ModelProvider {
  const c = checkModelConfig(value, at);
  const key = apiKey(c, at, env);
  const headers = { ...c.headers };
  const drive: DriveOptions = {
    name: c.name,
    provider: c.provider,
    // The key never appears in an error, even where a server quotes it back.
    ...(key === undefined ? {} : { secrets: [key] }),
    ...(c.maxRetries === undefined ? {} : { maxRetries: c.maxRetries }),
    ...(c.baseDelayMs === undefined ? {} : { baseDelayMs: c.baseDelayMs }),
    ...(c.maxDelayMs === undefined ? {} : { maxDelayMs: c.maxDelayMs }),
    ...(c.maxOutputTokens === undefined ? {} : { maxOutputTokens: c.maxOutputTokens }),
    ...(c.temperature === undefined ? {} : { temperature: c.temperature }),
  };
  if (c.provider === 'openai-compatible') {
    const provider = createOpenAICompatible({
      name: c.name,
      baseURL: c.baseURL!,
      headers,
      ...(key === undefined ? {} : { apiKey: key }),
    });
    const chat = provider.chatModel(c.model);
    // Each SSE chunk checked by hand, not by the AI SDK's zod schema (openai-chunks.ts), and the
    // successful response read in one stage, not the SDK's stream pipeline (openai-stream.ts).
    useChunkCheck(chat);
    leanStreaming(chat);
    return driveModel(chat, drive);
  }
  if (key === undefined) throw bad(`${at}.apiKeyEnv`, 'is required for anthropic');
  const provider = createAnthropic({
    apiKey: key,
    headers,
    ...(c.baseURL === undefined ? {} : { baseURL: c.baseURL }),
  });
  return driveModel(provider.messages(c.model), drive);
}

/** An OpenAI-compatible chat-completions model (vLLM, Ollama, llama.cpp, OpenAI). */
export function openAICompatible(
  options: Omit<ModelConfig, 'provider'> & { readonly baseURL: string },
): ModelProvider {
  return modelProvider({ ...options, provider: 'openai-compatible' });
}

/** An Anthropic messages model. */
export function anthropic(
  options: Omit<ModelConfig, 'provider'> & { readonly apiKeyEnv: string },
): ModelProvider {
  return modelProvider({ ...options, provider: 'anthropic' });
}
