/** The multi-host demo's own logic, without processes (the run itself: cluster.pg.test.ts, CI's demo). */
import type { HistoryRow } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import { parseDemoArgs, UsageError } from '../args.js';
import { supersededRows } from './hosts.js';

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
  });
});
