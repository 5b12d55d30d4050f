/** Reading MCP server configurations and options from the environment (see `from-env.ts`). */
import { errors } from '@turnwarden/protocol';
import {
  checkServerConfigs,
  type McpOptions,
  type McpServerConfig,
  SEPARATORS,
  type ToolNameSeparator,
} from './config.js';

export const ENV_VAR = 'TURNWARDEN_MCP_SERVERS';
export const SEPARATOR_ENV_VAR = 'TURNWARDEN_MCP_TOOL_SEPARATOR';

/** The server configurations in `TURNWARDEN_MCP_SERVERS` (none when it is unset or blank). */
export function serversFromEnv(env: NodeJS.ProcessEnv = process.env): McpServerConfig[] {
  const raw = env[ENV_VAR];
  if (raw === undefined || raw.trim() === '') return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw) as unknown;
  } catch {
    throw errors.invalidConfig(`${ENV_VAR} is not JSON`, { field: ENV_VAR });
  }
  return checkServerConfigs(parsed, ENV_VAR);
}

/** The options in the environment (`TURNWARDEN_MCP_TOOL_SEPARATOR`). */
export function optionsFromEnv(env: NodeJS.ProcessEnv = process.env): McpOptions {
  const separator = env[SEPARATOR_ENV_VAR];
  if (separator === undefined || separator === '') return {};
  if (!(SEPARATORS as readonly string[]).includes(separator)) {
    throw errors.invalidConfig(
      `${SEPARATOR_ENV_VAR} must be one of ${SEPARATORS.map((s) => `'${s}'`).join(', ')}`,
      { field: SEPARATOR_ENV_VAR },
    );
  }
  return { separator: separator as ToolNameSeparator };
}
