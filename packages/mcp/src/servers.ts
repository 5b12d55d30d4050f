/**
 * A set of MCP servers as Turnwarden tools: each server's tools, named `<server>.<tool>` (the
 * separator is an option), with their input schemas as `parameters`.
 */
import type { Tool as McpTool } from '@modelcontextprotocol/client';
import { errors } from '@turnwarden/protocol';
import type { Tool } from '@turnwarden/session';
import { checkServerConfigs, type McpOptions, type McpServerConfig, resolveOptions } from './config.js';
import { McpConnection } from './connection.js';

export interface McpServers {
  /** Every server's tools, in the order of the configurations, then of each server's list. */
  readonly tools: Tool[];
  /** Closes every server (stdio processes end). Calls after this fail with effect `none`. Idempotent. */
  close(): Promise<void>;
}

const ANY_OBJECT = { type: 'object' } as const;

function toTool(connection: McpConnection, tool: McpTool, name: string): Tool {
  const description =
    tool.description ??
    tool.title ??
    tool.annotations?.title ??
    `${tool.name} (MCP server ${connection.name})`;
  const schema = tool.inputSchema as Record<string, unknown> | undefined;
  return {
    name,
    description,
    parameters: typeof schema === 'object' && schema !== null ? schema : ANY_OBJECT,
    run: (args, ctx) => connection.call(tool, args, ctx),
  };
}

/**
 * Starts every server (in parallel) and lists its tools. Refused with INVALID_CONFIG naming the
 * field for a bad configuration or two tools of the same name; TOOL_ERROR naming the server
 * (`details.server`) for a server that cannot be started or does not list its tools. On any
 * refusal the servers already started are closed.
 */
export async function connectMcpServers(
  servers: readonly McpServerConfig[],
  options?: McpOptions,
): Promise<McpServers> {
  const configs = checkServerConfigs(servers);
  const resolved = resolveOptions(options);
  const connections = configs.map((c) => new McpConnection(c, resolved));
  const killAll = () => {
    // Last resort when the thread or process exits without close(): stdio servers also end
    // by themselves when their stdin closes.
    for (const c of connections) {
      for (const pid of c.pids()) {
        try {
          process.kill(pid);
        } catch {
          // already gone
        }
      }
    }
  };
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      process.off('exit', killAll);
      await Promise.all(connections.map((c) => c.close()));
    })();
    return closing;
  };
  process.on('exit', killAll);
  try {
    const listed = await Promise.allSettled(connections.map((c) => c.open()));
    const tools: Tool[] = [];
    const owner = new Map<string, string>();
    for (const [i, outcome] of listed.entries()) {
      if (outcome.status === 'rejected') throw outcome.reason;
      const connection = connections[i]!;
      for (const tool of outcome.value) {
        const name = `${connection.name}${resolved.separator}${tool.name}`;
        const first = owner.get(name);
        if (first !== undefined) {
          const field = `servers[${i}].name`;
          throw errors.invalidConfig(
            `${field}: tool ${name} of server ${connection.name} has the name of a tool of server ${first}`,
            { field },
          );
        }
        owner.set(name, connection.name);
        tools.push(toTool(connection, tool, name));
      }
    }
    return { tools, close };
  } catch (e) {
    await close();
    throw e;
  }
}

/**
 * The tools of a set of MCP servers, for a plugin module (`export const tools = await
 * mcpTools([...])`): the servers stay connected for the life of the worker thread that imported
 * it. Use `connectMcpServers` to be able to close them.
 */
export async function mcpTools(servers: readonly McpServerConfig[], options?: McpOptions): Promise<Tool[]> {
  return (await connectMcpServers(servers, options)).tools;
}
