/**
 * mcp — an MCP tool call's round trip (issue 11). Ours: the `echo` tool of `@turnwarden/mcp`
 * (its connection management, the abort and progress wiring, the result mapping), called as a
 * session's tool would be, over stdio to the fixture server. Baseline: the MCP SDK's bare
 * `client.callTool` to the same server, in the same run.
 */
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { connectMcpServers } from '@turnwarden/mcp';
import { FIXTURE_SERVER_PATH } from '@turnwarden/mcp/fixture';
import type { BenchContext } from './common.js';
import { row, type SectionResult } from './report.js';
import { median, quantile } from './stats.js';

async function ours(calls: number): Promise<number[]> {
  const servers = await connectMcpServers([
    { name: 'fx', transport: 'stdio', command: process.execPath, args: [FIXTURE_SERVER_PATH] },
  ]);
  try {
    const echo = servers.tools.find((t) => t.name === 'fx.echo');
    if (echo === undefined) throw new Error('the fixture has no echo tool');
    const ctx = {
      signal: new AbortController().signal,
      heartbeat: () => {},
      callId: 'c',
      workstreamId: 'bench',
      tenantId: 'bench',
    };
    const times: number[] = [];
    for (let i = 0; i < calls; i++) {
      const t0 = performance.now();
      await echo.run({ text: `call ${i}` }, ctx);
      times.push(performance.now() - t0);
    }
    return times;
  } finally {
    await servers.close();
  }
}

async function bare(calls: number): Promise<number[]> {
  const client = new Client({ name: 'bench', version: '1.0.0' }, { versionNegotiation: { mode: 'legacy' } });
  await client.connect(new StdioClientTransport({ command: process.execPath, args: [FIXTURE_SERVER_PATH] }));
  try {
    const times: number[] = [];
    for (let i = 0; i < calls; i++) {
      const t0 = performance.now();
      await client.callTool({ name: 'echo', arguments: { text: `call ${i}` } });
      times.push(performance.now() - t0);
    }
    return times;
  } finally {
    await client.close();
  }
}

export async function benchMcp(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const calls = ctx.quick ? 200 : 1_000;
  // Warm both (module caches, the first spawn), then measure.
  await ours(20);
  await bare(20);
  const o = await ours(calls);
  const b = await bare(calls);
  const p50 = median(o);
  return {
    name: 'mcp',
    title: 'an MCP tool call round trip over stdio',
    ours: `the echo tool of @turnwarden/mcp (run(args, ctx): connection, abort and progress wiring, result mapping), ${calls} calls in a row to the fixture server`,
    baseline: 'the MCP SDK’s bare client.callTool to the same server, the same calls',
    rows: [
      row('round trip p50', 'ms', p50, { baseline: median(b) }),
      row('round trip p99', 'ms', quantile(o, 0.99), { baseline: quantile(b, 0.99) }),
    ],
    notes: [
      'each side starts its own fixture server process (node) and connects over stdio; both speak the 2025 protocol',
    ],
  };
}
