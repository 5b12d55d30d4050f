/** The multi-host demo's own logic, without processes (the run itself: cluster.pg.test.ts, CI's demo). */
import type { HistoryRow } from '@turnwarden/protocol';
import { redisSkipReason } from '@turnwarden/relay-redis/testing';
import { slowPostgresSkipReason } from '@turnwarden/store/testing';
import { describe, expect, it } from 'vitest';
import { parseDemoArgs, UsageError } from '../args.js';
import { balancerSkipReason } from '../cluster/balancer.js';
import { formatHosts, runHostsDemo, supersededRows } from './hosts.js';

const rows = (...tokens: (number | undefined)[]): HistoryRow[] =>
  tokens.map((t, i) => ({
    workstreamId: 'w',
    seq: i + 1,
    commitKey: `k${i}`,
    generation: 1,
    message: { role: 'user', content: 'x' },
    createdAt: 0,
    ...(t === undefined ? {} : { fencingToken: t }),
  }));

describe('demo --hosts', () => {
  it('P6: counts the rows written under an older token than a row before them', () => {
    expect(supersededRows(rows(1, 1, 2, undefined, 2, 3))).toBe(0);
    expect(supersededRows(rows(1, 2, 1))).toBe(1);
    expect(supersededRows(rows(3, undefined, 2, 2, 4))).toBe(2);
  });

  it('takes --hosts with --postgres, alone or with a URL; refuses either without the other', () => {
    expect(parseDemoArgs(['--hosts', '3', '--postgres'])).toMatchObject({ hosts: 3, postgres: true });
    expect(parseDemoArgs(['--postgres', '--hosts', '2'])).toMatchObject({ hosts: 2, postgres: true });
    expect(parseDemoArgs(['--hosts', '3', '--postgres', 'postgres://u@db/x'])).toMatchObject({
      postgres: 'postgres://u@db/x',
    });
    expect(() => parseDemoArgs(['--hosts', '3'])).toThrow(UsageError);
    expect(() => parseDemoArgs(['--postgres'])).toThrow(UsageError);
    expect(() => parseDemoArgs(['--hosts', '1', '--postgres'])).toThrow(UsageError);
    expect(() => parseDemoArgs(['--hosts', '3', '--postgres', 'mysql://x'])).toThrow(UsageError);
    expect(parseDemoArgs(['--hosts', '3', '--postgres', '--balancer'])).toMatchObject({ balancer: true });
    expect(parseDemoArgs(['--hosts', '3', '--postgres'])).toMatchObject({ balancer: false });
    expect(() => parseDemoArgs(['--balancer'])).toThrow(UsageError);
    expect(parseDemoArgs(['--hosts', '3', '--postgres', '--redis'])).toMatchObject({ redis: true });
    expect(() => parseDemoArgs(['--redis'])).toThrow(UsageError);
  });
});

const skip = slowPostgresSkipReason();
if (skip !== undefined) process.stdout.write(`demo --hosts end to end: skipped — ${skip}\n`);

describe.skipIf(skip !== undefined)(
  'demo --hosts end to end (serve processes on a throwaway PostgreSQL)',
  () => {
    it('S7 P6 L3: one host killed and one paused mid-run; the database shows no dangling call and no row from a superseded holder', async () => {
      const args = parseDemoArgs(['--hosts', '3', '--postgres', '--workstreams', '12', '--turns', '4']);
      const report = await runHostsDemo({ ...args, hosts: 3, postgres: undefined });
      expect(report.checks.filter((c) => !c.ok)).toEqual([]);
      expect(report.ok).toBe(true);
      expect(report.chaos.map((e) => e.what)).toEqual(['killed', 'paused', 'resumed']);
      expect(report.turns).toHaveLength(48);
      expect(formatHosts(report)).toContain('RESULT: OK');
      // E1 across hosts: the SSE clients of the killed host's workstreams (a third of them, their
      // home) reconnected to the next host by Last-Event-ID — no event twice, no row missed
      // unannounced (the checks above).
      expect(report.relay).toBe('PostgreSQL LISTEN/NOTIFY');
      expect(report.sse.watchers).toBe(12);
      expect(report.sse.reconnects).toBeGreaterThan(0);
      expect(report.sse.resumed + report.sse.truncated).toBeGreaterThan(0);
    }, 120_000);

    it.skipIf(redisSkipReason() !== undefined)(
      'E1 S7: the same with the events relayed through Redis Streams — the SSE clients of the killed host resume on another by Last-Event-ID, replayed from Redis',
      async () => {
        const args = parseDemoArgs([
          '--hosts',
          '3',
          '--postgres',
          '--redis',
          '--workstreams',
          '12',
          '--turns',
          '4',
        ]);
        const report = await runHostsDemo({ ...args, hosts: 3, postgres: undefined });
        expect(report.checks.filter((c) => !c.ok)).toEqual([]);
        expect(report.relay).toMatch(/^Redis Streams at redis:\/\/127\.0\.0\.1:\d+$/);
        expect(report.sse.reconnects).toBeGreaterThan(0);
        expect(report.sse.resumed).toBeGreaterThan(0);
        expect(formatHosts(report)).toContain('events relayed by Redis Streams');
      },
      120_000,
    );

    it.skipIf(balancerSkipReason() !== undefined)(
      'S7 P6 L3 C7: the same through a real load balancer (HAProxy) — every call through it, one host killed and one paused, every check passes and no send is refused LEASED_ELSEWHERE',
      async () => {
        const args = parseDemoArgs([
          '--hosts',
          '3',
          '--postgres',
          '--balancer',
          '--workstreams',
          '12',
          '--turns',
          '4',
        ]);
        const report = await runHostsDemo({ ...args, hosts: 3, postgres: undefined });
        expect(report.checks.filter((c) => !c.ok)).toEqual([]);
        expect(report.balancer).toMatch(/^HAProxy at http:\/\/127\.0\.0\.1:\d+/);
        expect(report.chaos.map((e) => e.what)).toEqual(['killed', 'paused', 'resumed']);
        expect(report.turns).toHaveLength(48);
        expect(report.turns.every((t) => t.host === 'balancer')).toBe(true);
        expect(report.turns.reduce((n, t) => n + t.leasedElsewhere, 0)).toBe(0);
        expect(formatHosts(report)).toContain('every call through HAProxy');
      },
      120_000,
    );
  },
);
