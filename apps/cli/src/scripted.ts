/**
 * The offline scripted model and the demo tools, loaded as the plugin module they are: the demo
 * and the benchmarks opt in to them explicitly, as a host would to its own providers.
 */
export const SCRIPTED = {
  pluginModules: ['@turnwarden/session/scripted'],
  model: 'scripted',
} as const;
