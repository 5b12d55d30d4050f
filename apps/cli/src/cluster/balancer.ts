/**
 * A real load balancer in front of several `turnwarden serve` hosts: Debian's HAProxy, started
 * on a free loopback port with a configuration written for the hosts given — round robin,
 * health checks on `/readyz`, a request refused by a dead host's closed port redispatched to
 * another (`retries`, `option redispatch`), and SSE streams kept open (`timeout tunnel`). It is
 * what docs/cluster.md recommends, run as a child process the caller stops.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '@turnwarden/store/testing';

export interface Backend {
  readonly id: string;
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
}

export interface Balancer {
  readonly url: string;
  /** HAProxy's own output (its warnings and alerts). */
  readonly lines: string[];
  stop(): Promise<void>;
}

const HAPROXY = ['/usr/sbin/haproxy', '/usr/local/sbin/haproxy'];

/** Why there is no balancer to start here, or undefined. */
export function balancerSkipReason(): string | undefined {
  const bin = haproxyBinary();
  return bin === undefined
    ? 'no HAProxy (Debian: apt-get install haproxy) — the balancer tests are skipped'
    : undefined;
}

function haproxyBinary(): string | undefined {
  for (const b of HAPROXY) {
    if (spawnSync(b, ['-v'], { stdio: 'ignore' }).status === 0) return b;
  }
  return undefined;
}

/** The configuration: what docs/cluster.md shows, with these hosts. */
function haproxyConfig(port: number, backends: readonly Backend[]): string {
  const servers = backends.map((b) => {
    const { hostname, port: p } = new URL(b.url);
    return `  server ${b.id} ${hostname}:${p} check`;
  });
  return `global
  maxconn 4096

defaults
  mode http
  timeout connect 1s
  timeout client 120s
  timeout server 120s
  # SSE streams (GET …/events) stay open between events.
  timeout tunnel 1h
  # A request refused by a dead host (its port closed) goes to another one.
  retries 3
  option redispatch 1

frontend turnwarden
  bind 127.0.0.1:${port}
  default_backend hosts

backend hosts
  balance roundrobin
  # A draining or dead host leaves the rotation within two failed checks.
  option httpchk GET /readyz
  http-check expect status 200
  default-server inter 250ms fall 2 rise 2
${servers.join('\n')}
`;
}

export async function startBalancer(backends: readonly Backend[]): Promise<Balancer> {
  const bin = haproxyBinary();
  if (bin === undefined) throw new Error(balancerSkipReason());
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'tw-balancer-'));
  const cfg = join(dir, 'haproxy.cfg');
  writeFileSync(cfg, haproxyConfig(port, backends));
  // -db: in the foreground, logs to stderr; -W no master: one process to stop.
  const child: ChildProcess = spawn(bin, ['-db', '-f', cfg], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  const collect = (s: Buffer) => lines.push(...s.toString('utf8').split('\n').filter(Boolean));
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  // Ready once it answers through to a host.
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`haproxy exited (${child.exitCode}):\n${lines.join('\n')}`);
    }
    const ok = await fetch(`${url}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`haproxy did not answer within 10 s:\n${lines.join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url, lines, stop };
}
