/**
 * A plugin module whose MCP servers come from the environment: `TURNWARDEN_MCP_SERVERS` holds a
 * JSON array of server configurations (`McpServerConfig`), and `TURNWARDEN_MCP_TOOL_SEPARATOR`
 * optionally the separator of tool names (`.` by default; `__` for model APIs that accept only
 * `[A-Za-z0-9_-]`). Add `@turnwarden/mcp/from-env` to `pluginModules`: each session worker reads
 * the variables as it loads the module (workers inherit the host's environment) and starts its
 * own servers. A bad configuration fails the workers' start with INVALID_CONFIG naming
 * `TURNWARDEN_MCP_SERVERS[i].<field>`; so does a server that cannot be started (the plugin
 * module failed to load; the message carries the TOOL_ERROR naming the server).
 */
import type { Tool } from '@turnwarden/session';
import { optionsFromEnv, serversFromEnv } from './env-config.js';
import { mcpTools } from './servers.js';

export const tools: Tool[] = await mcpTools(serversFromEnv(), optionsFromEnv());
