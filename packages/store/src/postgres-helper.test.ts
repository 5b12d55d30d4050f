/**
 * The throwaway PostgreSQL helper every PostgreSQL test, demo and benchmark runs on
 * (`@turnwarden/store/testing`): which binaries it picks, why it would skip, a cluster of its own
 * (fast or durable) that `stop()` removes entirely, the run's shared cluster, and a start that
 * fails — saying why and leaving nothing behind. The clusters start inside the tests (not at
 * import) so that mutation testing sees which test covers which line. Skipped, saying why, where
 * no PostgreSQL is installed.
 */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type Postgres,
  postgresBin,
  postgresSkipReason,
  slowPostgresSkipReason,
  startPostgres,
} from './pg-cluster.js';

const skip = postgresSkipReason();
if (skip !== undefined) process.stdout.write(`postgres-helper.test.ts: clusters skipped — ${skip}\n`);

const made: string[] = [];
function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tw-pg-helper-'));
  made.push(dir);
  return dir;
}
function envWith(name: string, value: string | undefined, body: () => Promise<void> | void) {
  const before = process.env[name];
  if (value === undefined) delete process.env[name];
  else process.env[name] = value;
  const restore = () => {
    if (before === undefined) delete process.env[name];
    else process.env[name] = before;
  };
  try {
    const out = body();
    if (out instanceof Promise) return out.finally(restore);
    restore();
    return undefined;
  } catch (e) {
    restore();
    throw e;
  }
}
afterEach(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function show(url: string, setting: string): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<Record<string, string>>(`SHOW ${setting}`);
    return String(rows[0]?.[setting]);
  } finally {
    await client.end();
  }
}

/** How a TCP connection to the port on loopback ends: 'connected', or the error's code. */
function refused(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve('connected');
    });
    socket.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? String(e)));
  });
}

describe('which server binaries, and why not', () => {
  it('picks the newest major version that has an initdb — by number, not by name', () => {
    const root = scratch();
    for (const [version, initdb] of [
      ['9', true],
      ['15', true],
      ['13', true],
      ['16', false],
    ] as const) {
      mkdirSync(join(root, version, 'bin'), { recursive: true });
      if (initdb) writeFileSync(join(root, version, 'bin', 'initdb'), '');
    }
    expect(postgresBin(root)).toBe(join(root, '15', 'bin'));
  });

  it('answers undefined where nothing is installed', () => {
    const root = scratch();
    expect(postgresBin(root)).toBeUndefined();
    expect(postgresBin(join(root, 'absent'))).toBeUndefined();
  });

  it('says why a start would be skipped: no version with an initdb', () => {
    const root = scratch();
    expect(postgresSkipReason(root)).toBe(
      `no PostgreSQL server binaries in ${root} (apt-get install postgresql)`,
    );
    mkdirSync(join(root, '15', 'bin'), { recursive: true });
    expect(postgresSkipReason(root)).toBe(
      `no PostgreSQL server binaries in ${root} (apt-get install postgresql)`,
    );
  });

  it('the slow tests skip on the repeat pass, whatever is installed', () =>
    envWith('TURNWARDEN_REPEAT_PASS', '1', () => {
      expect(slowPostgresSkipReason()).toBe('TURNWARDEN_REPEAT_PASS: these ran on the first Node version');
    }));

  it('the slow tests run where a cluster can start and this is not the repeat pass', () =>
    envWith('TURNWARDEN_REPEAT_PASS', undefined, () => {
      expect(slowPostgresSkipReason()).toBe(skip);
    }));

  it('a start with binaries that have no initdb answers { skip } and starts nothing', async () => {
    const empty = scratch();
    await expect(startPostgres({ own: true, bin: empty })).resolves.toEqual({
      skip: `no initdb in ${empty}`,
    });
    // Outside a test run that shares a cluster, a plain start is one of its own too.
    await envWith('TURNWARDEN_TEST_POSTGRES_URL', undefined, async () => {
      await expect(startPostgres({ bin: empty })).resolves.toEqual({ skip: `no initdb in ${empty}` });
    });
  });
});

describe('the run’s shared cluster', () => {
  it('is handed out as is — no directory, a stop that stops nothing — unless a durable or own one is asked for', () =>
    envWith('TURNWARDEN_TEST_POSTGRES_URL', 'postgres://postgres@127.0.0.1:6543/turnwarden', async () => {
      const shared = (await startPostgres()) as Postgres;
      expect(shared).toMatchObject({
        url: 'postgres://postgres@127.0.0.1:6543/turnwarden',
        port: 6543,
        dir: '',
      });
      expect(() => shared.stop()).not.toThrow();
      // Asked for one of its own with binaries that cannot run: the shared one is not handed out.
      const empty = scratch();
      expect(await startPostgres({ own: true, bin: empty })).toEqual({ skip: `no initdb in ${empty}` });
      expect(await startPostgres({ durable: true, bin: empty })).toEqual({ skip: `no initdb in ${empty}` });
    }));
});

describe.skipIf(skip !== undefined)('a cluster of its own', () => {
  it('serves a database on a free port, runs without fsync, and leaves nothing behind', async () => {
    const server = (await startPostgres({ own: true })) as Postgres;
    expect(server.url).toBe(`postgres://postgres@127.0.0.1:${server.port}/turnwarden`);
    expect(server.dir.startsWith(join(tmpdir(), 'tw-pg-'))).toBe(true);
    const client = new pg.Client({ connectionString: server.url });
    try {
      await client.connect();
      await client.query('CREATE TABLE t (v int)');
      await client.query('INSERT INTO t VALUES (42)');
      const { rows } = await client.query<{ v: number }>('SELECT v FROM t');
      expect(rows).toEqual([{ v: 42 }]);
      const { rows: settings } = await client.query<{ fsync: string; fpw: string; encoding: string }>(
        "SELECT current_setting('fsync') AS fsync, current_setting('full_page_writes') AS fpw, pg_encoding_to_char(encoding) AS encoding FROM pg_database WHERE datname = current_database()",
      );
      expect(settings).toEqual([{ fsync: 'off', fpw: 'off', encoding: 'UTF8' }]);
    } finally {
      await client.end();
      server.stop();
    }
    expect(existsSync(server.dir)).toBe(false);
    // The server is stopped, not only its directory removed: nothing listens on its port.
    await expect(refused(server.port)).resolves.toBe('ECONNREFUSED');
  });

  it('a durable one keeps fsync and full-page writes on, as production does', async () => {
    const server = (await startPostgres({ durable: true })) as Postgres;
    try {
      expect(await show(server.url, 'fsync')).toBe('on');
      expect(await show(server.url, 'full_page_writes')).toBe('on');
    } finally {
      server.stop();
    }
    expect(existsSync(server.dir)).toBe(false);
    await expect(refused(server.port)).resolves.toBe('ECONNREFUSED');
  });

  it('a start that fails says why and removes the directory it made', async () => {
    // Binaries whose initdb fails, readable by the postgres user the helper runs them as (root).
    const bin = scratch();
    chmodSync(bin, 0o755);
    writeFileSync(join(bin, 'initdb'), '#!/bin/sh\necho "initdb: the disk is on fire" >&2\nexit 1\n', {
      mode: 0o755,
    });
    const tmp = scratch();
    chmodSync(tmp, 0o777);
    await envWith('TMPDIR', tmp, async () => {
      await expect(startPostgres({ own: true, bin })).rejects.toThrow(
        /^could not start a throwaway PostgreSQL: initdb: the disk is on fire/,
      );
      expect(readdirSync(tmp)).toEqual([]);
    });
  });
});
