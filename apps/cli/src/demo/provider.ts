/**
 * Which model the demo's turns use. `scripted` (default): the offline scripted model in the
 * session worker. `openai-compatible`: the real provider of `@turnwarden/providers` in the
 * session worker, over HTTP — against a loopback server on 127.0.0.1 that plays the same
 * scripts (the default), or against a real server (`--base-url`, `--model`), which gets a
 * conversation of plain prompts instead of scripts.
 */
import { fileURLToPath } from 'node:url';
import { LoopbackServer, playScripts } from '@turnwarden/providers/loopback';
import { SCRIPTED } from '../scripted.js';

export interface DemoModel {
  readonly pluginModules: readonly string[];
  readonly model: string;
  /** What the banner and the summary call it. */
  readonly label: string;
  /** True when the turns are scripts (the scripted model, or the loopback server playing them). */
  readonly scripted: boolean;
  close(): Promise<void>;
}

export interface ProviderArgs {
  readonly provider: 'scripted' | 'openai-compatible';
  readonly baseUrl: string | undefined;
  readonly model: string | undefined;
  readonly apiKeyEnv: string | undefined;
}

const FROM_ENV = '@turnwarden/providers/from-env';

export async function demoModel(args: ProviderArgs): Promise<DemoModel> {
  if (args.provider === 'scripted') {
    return { ...SCRIPTED, label: 'scripted (offline)', scripted: true, close: async () => {} };
  }
  const loopback =
    args.baseUrl === undefined ? await LoopbackServer.start({ fallback: playScripts }) : undefined;
  const baseURL = args.baseUrl ?? loopback!.url;
  // Session workers read the models from the environment as they load the from-env plugin.
  process.env.TURNWARDEN_MODELS = JSON.stringify([
    {
      name: 'demo-llm',
      provider: 'openai-compatible',
      baseURL,
      model: args.model ?? 'loopback',
      maxRetries: loopback === undefined ? 3 : 0,
      ...(args.apiKeyEnv === undefined ? {} : { apiKeyEnv: args.apiKeyEnv }),
    },
  ]);
  return {
    // The demo tools (echo, sleep, wedge …) still come from the scripted plugin.
    pluginModules: [fileURLToPath(import.meta.resolve(FROM_ENV)), ...SCRIPTED.pluginModules],
    model: 'demo-llm',
    label:
      loopback === undefined
        ? `openai-compatible ${args.model ?? 'loopback'} at ${baseURL}`
        : `openai-compatible, loopback server ${baseURL} playing the scripts`,
    scripted: loopback !== undefined,
    close: async () => {
      await loopback?.close();
    },
  };
}
