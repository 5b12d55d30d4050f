/** Server configurations and options: refusals are INVALID_CONFIG naming the field, before anything starts. */
import { isTurnwardenError } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import { resolveOptions } from './config.js';
import {
  checkServerConfig,
  checkServerConfigs,
  connectMcpServers,
  type McpServerConfig,
  optionsFromEnv,
  serversFromEnv,
} from './index.js';

function refusedField(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(isTurnwardenError(e, 'INVALID_CONFIG')).toBe(true);
    return (e as { details: { field: string } }).details.field;
  }
  return expect.fail('not refused');
}

const stdio = { name: 'files', transport: 'stdio', command: 'my-server' } as const;
const http = { name: 'web', transport: 'http', url: 'https://mcp.example/mcp' } as const;

describe('server configurations', () => {
  it('takes stdio and http servers with their optional settings', () => {
    expect(
      checkServerConfigs([
        { ...stdio, args: ['--root', '/tmp'], env: { TOKEN: 'x' }, cwd: '/tmp' },
        { ...http, headers: { Authorization: 'Bearer x' } },
      ]),
    ).toHaveLength(2);
  });

  it.each([
    [{ ...stdio, url: 'http://x' }, 'servers[0].url'],
    [{ ...http, command: 'x' }, 'servers[0].command'],
    [{ ...stdio, timeout: 5 }, 'servers[0].timeout'],
    [{ ...stdio, name: 'a.b' }, 'servers[0].name'],
    [{ ...stdio, name: '' }, 'servers[0].name'],
    [{ ...stdio, name: 'x'.repeat(65) }, 'servers[0].name'],
    [{ ...stdio, transport: 'sse' }, 'servers[0].transport'],
    [{ name: 'files', transport: 'stdio' }, 'servers[0].command'],
    [{ ...stdio, args: 'a b' }, 'servers[0].args'],
    [{ ...stdio, args: ['a', 2] }, 'servers[0].args[1]'],
    [{ ...stdio, env: { TOKEN: 1 } }, 'servers[0].env.TOKEN'],
    [{ ...stdio, env: { 'A-B': 'x' } }, 'servers[0].env.A-B'],
    [{ ...stdio, cwd: '' }, 'servers[0].cwd'],
    [{ ...http, url: 'ftp://x/mcp' }, 'servers[0].url'],
    [{ ...http, url: 'not a url' }, 'servers[0].url'],
    [{ ...http, headers: { 'x-key': 2 } }, 'servers[0].headers.x-key'],
    [{ ...http, headers: { 'bad header': 'x' } }, 'servers[0].headers.bad header'],
    ['files', 'servers[0]'],
  ])('refuses %j naming %s', (config, field) => {
    expect(refusedField(() => checkServerConfigs([config]))).toBe(field);
  });

  it('refuses a second server of the same name, and a list that is not an array', () => {
    expect(refusedField(() => checkServerConfigs([stdio, { ...http, name: 'files' }]))).toBe(
      'servers[1].name',
    );
    expect(refusedField(() => checkServerConfigs(stdio))).toBe('servers');
    expect(refusedField(() => checkServerConfig({ ...stdio, cwd: 1 }, 'mine'))).toBe('mine.cwd');
  });

  it('never puts an env or header value in the error', () => {
    try {
      checkServerConfigs([{ ...stdio, env: { 'BAD NAME': 'secret-value' } }]);
      expect.fail('not refused');
    } catch (e) {
      expect((e as Error).message).not.toContain('secret-value');
    }
  });

  it('connectMcpServers refuses a bad configuration or option before starting anything', async () => {
    await expect(connectMcpServers([{ ...stdio, command: '' } as McpServerConfig])).rejects.toMatchObject({
      code: 'INVALID_CONFIG',
      details: { field: 'servers[0].command' },
    });
    await expect(connectMcpServers([stdio], { separator: '/' as '.' })).rejects.toMatchObject({
      code: 'INVALID_CONFIG',
      details: { field: 'options.separator' },
    });
  });
});

describe('options', () => {
  it('fills in the defaults', () => {
    expect(resolveOptions(undefined)).toEqual({
      separator: '.',
      connectTimeoutMs: 30_000,
      restartBaseDelayMs: 500,
      restartMaxDelayMs: 30_000,
      callTimeoutMs: undefined,
      stderr: 'inherit',
    });
  });

  it.each([
    [{ color: 'red' }, 'options.color'],
    [{ separator: '/' }, 'options.separator'],
    [{ connectTimeoutMs: 0 }, 'options.connectTimeoutMs'],
    [{ restartBaseDelayMs: -1 }, 'options.restartBaseDelayMs'],
    [{ restartMaxDelayMs: 1.5 }, 'options.restartMaxDelayMs'],
    [{ callTimeoutMs: 2 ** 31 }, 'options.callTimeoutMs'],
    [{ stderr: 'pipe' }, 'options.stderr'],
  ])('refuses %j naming %s', (options, field) => {
    expect(refusedField(() => resolveOptions(options))).toBe(field);
  });
});

describe('from the environment', () => {
  it('reads TURNWARDEN_MCP_SERVERS: none when unset or blank', () => {
    expect(serversFromEnv({})).toEqual([]);
    expect(serversFromEnv({ TURNWARDEN_MCP_SERVERS: '  ' })).toEqual([]);
    expect(serversFromEnv({ TURNWARDEN_MCP_SERVERS: JSON.stringify([stdio, http]) })).toEqual([stdio, http]);
  });

  it('names the variable, and the entry’s field, of a bad configuration', () => {
    expect(refusedField(() => serversFromEnv({ TURNWARDEN_MCP_SERVERS: '[{' }))).toBe(
      'TURNWARDEN_MCP_SERVERS',
    );
    expect(refusedField(() => serversFromEnv({ TURNWARDEN_MCP_SERVERS: '{}' }))).toBe(
      'TURNWARDEN_MCP_SERVERS',
    );
    expect(
      refusedField(() =>
        serversFromEnv({ TURNWARDEN_MCP_SERVERS: JSON.stringify([http, { name: 'x', transport: 'stdio' }]) }),
      ),
    ).toBe('TURNWARDEN_MCP_SERVERS[1].command');
  });

  it('reads the separator from TURNWARDEN_MCP_TOOL_SEPARATOR', () => {
    expect(optionsFromEnv({})).toEqual({});
    expect(optionsFromEnv({ TURNWARDEN_MCP_TOOL_SEPARATOR: '__' })).toEqual({ separator: '__' });
    expect(refusedField(() => optionsFromEnv({ TURNWARDEN_MCP_TOOL_SEPARATOR: ':' }))).toBe(
      'TURNWARDEN_MCP_TOOL_SEPARATOR',
    );
  });
});
