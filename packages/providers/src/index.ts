/**
 * @turnwarden/providers — model providers for Turnwarden's session workers, on the AI SDK's
 * provider layer (`LanguageModelV3`, driven through `doStream`): OpenAI-compatible chat
 * completions and Anthropic messages. Export them from a plugin module:
 *
 *   import { openAICompatible } from '@turnwarden/providers';
 *   export const models = [openAICompatible({ name: 'local', baseURL: 'http://localhost:11434/v1', model: 'llama3.1' })];
 *
 * or list `@turnwarden/providers/from-env` in `pluginModules` and describe the models in
 * `TURNWARDEN_MODELS`.
 */
export { anthropic, checkModelConfig, type ModelConfig, modelProvider, openAICompatible } from './config.js';
export { type DriveOptions, driveModel, type RetryOptions } from './drive.js';
export { toPrompt, toTools } from './prompt.js';
