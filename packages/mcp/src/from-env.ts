/**
 * A plugin module whose MCP servers come from the environment: `TURNWARDEN_MCP_SERVERS` holds a
 * JSON array of server configurations (`McpServerConfig`), and `TURNWARDEN_MCP_TOOL_SEPARATOR`
 * optionally the separator of tool names (`.` by default; `__` for model APIs that accept only
 * `[A-Za-z0-9_-]`). Add `@turnwarden/mcp/from-env` to `pluginModules`: each session worker reads
 * the variables as it loads the module (workers inherit the host's environment) and starts its
 * own servers. A bad configuration fails the workers' start with INVALID_CONFIG naming
 * `TURNWARDEN_MCP_SERVERS[i].<field>`; so does a server that cannot be started (the plugin
 * module failed to load; the message carries the TOOL_ERROR naming the server).
 *
 * Listed in `hostToolModules` instead, the module is loaded once, on the supervisor's thread: one
 * set of servers serves every session, the supervisor closes them at shutdown (`close`), and the
 * server processes are reaped normally — prefer it (a worker thread that ended cannot reap the
 * processes it spawned).
 */
import type { Tool } from '@turnwarden/session';
import { optionsFromEnv, serversFromEnv } from './env-config.js';
import { connectMcpServers } from './servers.js';

const servers = await connectMcpServers(serversFromEnv(), optionsFromEnv());

export const tools: Tool[] = servers.tools;

/** Closes the servers (the supervisor calls it at shutdown for a host tool module). */
export function close(): Promise<void> {
  return servers.close();
}
