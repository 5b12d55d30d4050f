/**
 * `turnwarden demo --server`: the workload over HTTP against a running server, its histories
 * read back over HTTP and audited (S1, S2; L1 and L3 through the server's own watchdog).
 */
import { checkServerConfig, type RunningServer, startServer } from '@turnwarden/server';
import { afterEach, describe, expect, it } from 'vitest';
import { parseDemoArgs } from '../args.js';
import { runRemoteDemo } from './remote.js';

const TOKEN = 'remote-demo-token-0123456789';
let server: RunningServer | undefined;
afterEach(async () => {
  await server?.shutdown();
  server = undefined;
});

/** As in run.test.ts: the subject is how each turn ends, not how soon a stall is seen. */
const TIMEOUT_MS = 1_500;

describe('demo against a server', () => {
  it('L1 L3 S1 S2: every turn ends as its kind must and every history read back over HTTP is complete', async () => {
    server = await startServer(
      checkServerConfig({
        port: 0,
        db: ':memory:',
        logLevel: 'silent',
        tokens: [{ token: TOKEN, tenantId: 'demo', principal: 'demo-user' }],
        runtime: {
          watchdog: { timeoutMs: TIMEOUT_MS, pollMs: 50, graceMs: 150 },
          pool: { maxWorkers: 4, warmWorkers: 2 },
        },
      }),
    );
    const args = parseDemoArgs([
      `--server=${server.url}`,
      `--token=${TOKEN}`,
      '--workstreams=4',
      '--turns=3',
      '--seed=3',
      `--timeout-ms=${TIMEOUT_MS}`,
    ]);
    const report = await runRemoteDemo({ ...args, server: args.server!, token: args.token! });
    expect(report.checks.filter((c) => !c.ok)).toEqual([]);
    expect(report.ok).toBe(true);
    expect(report.records).toHaveLength(4 * 3 + 4);
    expect(report.records.filter((r) => r.kind === 'store-fault' || r.kind === 'store-reject')).toEqual([]);
    for (const r of report.records.filter((r) => r.kind === 'stall')) {
      expect(r).toMatchObject({ status: 'interrupted', abortReason: 'watchdog' });
    }
    for (const r of report.records.filter((r) => r.kind === 'wedge')) {
      expect(r).toMatchObject({ status: 'interrupted', workerTerminated: true });
    }
    // M1–M4 over HTTP: the second message went while the first turn's tool ran, with its policy.
    const doubled = report.records.filter((r) => r.kind === 'double-text');
    expect(doubled.length).toBeGreaterThan(0);
    for (const r of doubled) {
      expect(r.verdict).toBe('ok');
      expect(r.doubleText?.policy).toBe(r.variant);
      expect(r.doubleText?.second).not.toBe('not_sent');
    }
  }, 60_000);

  it('refuses a server without a token, and a token without a server', () => {
    expect(() => parseDemoArgs(['--server=http://127.0.0.1:1'])).toThrow(/needs --token/);
    expect(() => parseDemoArgs(['--token=x'])).toThrow(/needs --server/);
  });
});
