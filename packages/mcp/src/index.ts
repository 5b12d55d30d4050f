/**
 * @turnwarden/mcp — the tools of MCP servers (stdio or Streamable HTTP) as Turnwarden tools,
 * named `<server>.<tool>`. Export them from a plugin module:
 *
 *   import { mcpTools } from '@turnwarden/mcp';
 *   export const tools = await mcpTools([{ name: 'files', transport: 'stdio', command: 'my-mcp-server' }]);
 *
 * or list `@turnwarden/mcp/from-env` in `pluginModules` and describe the servers in
 * `TURNWARDEN_MCP_SERVERS`. See README.md for progress, effects and restarts.
 */
export {
  checkServerConfig,
  checkServerConfigs,
  type McpHttpServerConfig,
  type McpOptions,
  type McpServerConfig,
  type McpStdioServerConfig,
  type ToolNameSeparator,
} from './config.js';
export { ENV_VAR, optionsFromEnv, SEPARATOR_ENV_VAR, serversFromEnv } from './env-config.js';
export { connectMcpServers, type McpServers, mcpTools } from './servers.js';
