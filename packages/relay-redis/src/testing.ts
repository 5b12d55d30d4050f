/**
 * The testing entry (`@turnwarden/relay-redis/testing`): a throwaway Redis server for tests —
 * `redis-server` on a free loopback port, nothing saved to disk, killed by `stop`. Debian's
 * `redis-server` package brings it (`.ci/run` installs it); where it is missing, tests skip and
 * say why (`redisSkipReason`).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';

const BINARIES = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'];

export const redisBin = (): string | undefined => BINARIES.find((b) => existsSync(b));

/** Why the Redis tests cannot run here, or undefined when they can. */
export const redisSkipReason = (): string | undefined =>
  redisBin() === undefined ? 'redis-server is not installed (apt-get install redis-server)' : undefined;

export interface RedisServer {
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

export async function startRedis(): Promise<RedisServer> {
  const bin = redisBin();
  if (bin === undefined) throw new Error(redisSkipReason());
  const port = await freePort();
  const child: ChildProcess = spawn(
    bin,
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--loglevel',
      'warning',
    ],
    { stdio: 'ignore' },
  );
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  for (let i = 0; ; i++) {
    if (await answers(port)) break;
    if (i > 100 || child.exitCode !== null) {
      child.kill('SIGKILL');
      throw new Error(`redis-server did not start on port ${port}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async stop() {
      if (child.exitCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Whether the server answers PING. */
function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    socket.setTimeout(500);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (d) => {
      socket.destroy();
      resolve(d.toString().startsWith('+PONG'));
    });
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
  });
}

/** A loopback port nothing listens on (now). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}
