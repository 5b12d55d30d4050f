/**
 * A throwaway PostgreSQL cluster for tests, demos and benchmarks (`@turnwarden/store/testing`): the server binaries on this machine (Debian's
 * `/usr/lib/postgresql/<version>/bin`), a cluster in a temporary directory owned by the
 * `postgres` user (when run as root, the server runs as that user), a free port on 127.0.0.1,
 * and a `stop()` that removes it all. Where no PostgreSQL is installed, `startPostgres` says why
 * instead, so a suite can skip visibly.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Postgres {
  /** `postgres://postgres@127.0.0.1:<port>/turnwarden` */
  readonly url: string;
  readonly port: number;
  /** The temporary directory holding the cluster (removed by `stop`). */
  readonly dir: string;
  stop(): void;
}

/** Where Debian installs PostgreSQL's server binaries, one directory per major version. */
const INSTALLED = '/usr/lib/postgresql';

/** The newest server binaries installed under `root` (default Debian's), or undefined. */
export function postgresBin(root: string = INSTALLED): string | undefined {
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] === undefined ? undefined : join(root, versions[0], 'bin');
}

/** A TCP port free on the loopback interface now (for a server a test or demo starts). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export interface StartPostgresOptions {
  /**
   * Keep `fsync` and `full_page_writes` on, as a production server runs (benchmarks). Default
   * false: tests need no durability across a power loss, and run faster without it.
   */
  readonly durable?: boolean;
  /** A cluster of its own even when the test run shares one (TURNWARDEN_TEST_POSTGRES_URL). */
  readonly own?: boolean;
  /** The server binaries to run (a directory holding `initdb`, `pg_ctl`, `createdb`). Default: the newest installed. */
  readonly bin?: string;
}

/**
 * Why no cluster can be started on this machine, or undefined if one can (checked without
 * starting one). `root` is where the versions are installed (default Debian's).
 */
export function postgresSkipReason(root: string = INSTALLED): string | undefined {
  return skipReason(postgresBin(root), root);
}

function skipReason(bin: string | undefined, root: string): string | undefined {
  if (bin === undefined) return `no PostgreSQL server binaries in ${root} (apt-get install postgresql)`;
  if (!existsSync(join(bin, 'initdb'))) return `no initdb in ${bin}`;
  if (process.getuid?.() === 0 && spawnSync('id', ['-u', 'postgres']).status !== 0) {
    return 'running as root and there is no postgres user to run the server as';
  }
  return undefined;
}

/**
 * Why the slow PostgreSQL tests — hosts as processes, the harness, the demo — do not run here:
 * no PostgreSQL (as `postgresSkipReason`), or `TURNWARDEN_REPEAT_PASS=1`, the suite's second run
 * on another Node version (`.ci/run`), where what does not depend on Node's version is not run
 * again.
 */
export function slowPostgresSkipReason(): string | undefined {
  if (process.env.TURNWARDEN_REPEAT_PASS === '1') {
    return 'TURNWARDEN_REPEAT_PASS: these ran on the first Node version';
  }
  return postgresSkipReason();
}

/** Starts a cluster, or answers why it cannot (`{ skip }`). */
export async function startPostgres(
  options: StartPostgresOptions = {},
): Promise<Postgres | { readonly skip: string }> {
  // A test run may share one cluster (vitest's global setup, tools/vitest-postgres.ts): every
  // user of it works in schemas of its own, and stopping it is the run's business.
  const shared = process.env.TURNWARDEN_TEST_POSTGRES_URL;
  if (shared !== undefined && options.durable !== true && options.own !== true) {
    return { url: shared, port: Number(new URL(shared).port), dir: '', stop() {} };
  }
  const durability = options.durable === true ? '' : ' -c fsync=off -c full_page_writes=off';
  const bin = options.bin ?? postgresBin();
  const skip = skipReason(bin, INSTALLED);
  if (skip !== undefined || bin === undefined) return { skip: skip ?? 'no PostgreSQL server binaries' };
  const asRoot = process.getuid?.() === 0;
  let uid: number | undefined;
  let gid: number | undefined;
  if (asRoot) {
    const id = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
    uid = Number(id.stdout.trim());
    gid = Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout.trim());
  }
  const dir = mkdtempSync(join(tmpdir(), 'tw-pg-'));
  chmodSync(dir, 0o700);
  if (uid !== undefined && gid !== undefined) chownSync(dir, uid, gid);
  // As root, every server command runs as the postgres user.
  const run = (cmd: string, args: string[]) =>
    asRoot
      ? execFileSync('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args], { stdio: 'pipe' })
      : execFileSync(join(bin, cmd), args, { stdio: 'pipe' });
  const data = join(dir, 'data');
  const port = await freePort();
  try {
    run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8']);
    run('pg_ctl', [
      '-D',
      data,
      '-l',
      join(dir, 'server.log'),
      '-o',
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1${durability}`,
      '-w',
      'start',
    ]);
    run('createdb', ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', 'turnwarden']);
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    const stderr = (e as { stderr?: Buffer }).stderr?.toString() ?? String(e);
    throw new Error(`could not start a throwaway PostgreSQL: ${stderr}`);
  }
  return {
    url: `postgres://postgres@127.0.0.1:${port}/turnwarden`,
    port,
    dir,
    stop() {
      try {
        run('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
