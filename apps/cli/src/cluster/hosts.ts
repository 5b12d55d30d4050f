/**
 * Several `turnwarden serve` processes on one PostgreSQL database — the shape of a deployment
 * that outgrew one machine — for the multi-host demo, its tests and the benchmark. Each host is
 * a real process with its own host id, so it can be killed (SIGKILL) or paused (SIGSTOP: a long
 * GC pause, a partition) and resumed (SIGCONT) like a real one.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

// From src/ (tests) and dist/ alike: the built entry point.
const MAIN = fileURLToPath(new URL('../../dist/main.js', import.meta.url));

/** `exited`: the process ended on its own (a crash): no request goes to it any more. */
type HostState = 'running' | 'paused' | 'killed' | 'stopped' | 'exited';

export interface HostProcess {
  readonly id: string;
  readonly url: string;
  readonly child: ChildProcess;
  state: HostState;
  /** The process's output lines (pino JSON logs and the serve banner). */
  readonly lines: string[];
}

export interface HostClusterOptions {
  readonly postgres: string;
  /** The store's schema in that database (default public). */
  readonly schema?: string;
  readonly hosts: number;
  /** Host ids (default h1, h2, …). */
  readonly ids?: readonly string[];
  readonly token: string;
  readonly tenantId?: string;
  /** The runtime's configuration of every host (lease, watchdog, pool…). */
  readonly runtime?: Record<string, unknown>;
  readonly logLevel?: 'info' | 'warn' | 'debug';
  readonly startTimeoutMs?: number;
  /** A Redis server the hosts relay their events through (`serve --redis`). */
  readonly redis?: string;
}

export interface ApiResponse {
  readonly status: number;
  // biome-ignore lint/suspicious/noExplicitAny: the API's JSON bodies, read field by field as the OpenAPI document describes them
  readonly body: any;
}

export class HostCluster {
  private constructor(
    readonly hosts: HostProcess[],
    private readonly dir: string,
    private readonly token: string,
  ) {}

  static async start(options: HostClusterOptions): Promise<HostCluster> {
    const dir = mkdtempSync(join(tmpdir(), 'tw-hosts-'));
    const config = join(dir, 'config.json');
    writeFileSync(
      config,
      JSON.stringify({
        logLevel: options.logLevel ?? 'info',
        ...(options.schema === undefined ? {} : { postgresSchema: options.schema }),
        ...(options.redis === undefined ? {} : { redis: options.redis }),
        shutdownGraceMs: 2_000,
        tokens: [{ token: options.token, tenantId: options.tenantId ?? 'acme', principal: 'demo' }],
        runtime: options.runtime ?? {},
      }),
    );
    const ids = options.ids ?? Array.from({ length: options.hosts }, (_, i) => `h${i + 1}`);
    const cluster = new HostCluster([], dir, options.token);
    try {
      // One at a time: each applies migrations (serialized by the store anyway) and warms its pool.
      for (const id of ids) {
        cluster.hosts.push(await spawnHost(id, options.postgres, config, options.startTimeoutMs ?? 30_000));
      }
    } catch (e) {
      await cluster.stop();
      throw e;
    }
    return cluster;
  }

  host(i: number): HostProcess {
    const h = this.hosts[i];
    if (h === undefined) throw new Error(`no host #${i}`);
    return h;
  }

  async api(i: number, method: string, path: string, body?: unknown): Promise<ApiResponse> {
    const res = await fetch(`${this.host(i).url}/v1${path}`, {
      method,
      headers: {
        authorization: `Bearer ${this.token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: text === '' ? undefined : JSON.parse(text) };
  }

  /** SIGKILL: the host dies mid-whatever, its leases left to expire. */
  async kill(i: number): Promise<void> {
    const h = this.host(i);
    if (h.state === 'killed' || h.state === 'stopped' || h.state === 'exited') return;
    const exited = new Promise<void>((resolve) => h.child.once('exit', () => resolve()));
    h.state = 'killed';
    h.child.kill('SIGKILL');
    await exited;
  }

  /** SIGSTOP: every thread of the host stops, as in a long pause; its leases run out. */
  pause(i: number): void {
    const h = this.host(i);
    if (h.state !== 'running') return;
    h.child.kill('SIGSTOP');
    h.state = 'paused';
  }

  resume(i: number): void {
    const h = this.host(i);
    if (h.state !== 'paused') return;
    h.child.kill('SIGCONT');
    h.state = 'running';
  }

  /** The host's log lines with this message (pino's `msg`). */
  logged(i: number, msg: string): Record<string, unknown>[] {
    return this.host(i)
      .lines.filter((l) => l.startsWith('{') && l.includes(msg))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === msg);
  }

  /** SIGTERM to every live host (paused ones are resumed first), then removes the temp dir. */
  async stop(): Promise<void> {
    await Promise.all(
      this.hosts.map(async (h) => {
        if (h.state === 'killed' || h.state === 'stopped' || h.state === 'exited') return;
        if (h.state === 'paused') h.child.kill('SIGCONT');
        const exited = new Promise<void>((resolve) => h.child.once('exit', () => resolve()));
        h.child.kill('SIGTERM');
        const timer = setTimeout(() => h.child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
        h.state = 'stopped';
      }),
    );
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function spawnHost(id: string, postgres: string, config: string, timeoutMs: number): Promise<HostProcess> {
  const child = spawn(
    process.execPath,
    [MAIN, 'serve', '--port', '0', '--postgres', postgres, '--host-id', id, '--config', config],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const lines: string[] = [];
  let partial = '';
  const onData = (s: string) => {
    partial += s;
    const parts = partial.split('\n');
    partial = parts.pop() ?? '';
    lines.push(...parts);
  };
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  return new Promise<HostProcess>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`host ${id} did not start within ${timeoutMs} ms:\n${lines.slice(-20).join('\n')}`));
    }, timeoutMs);
    const onExit = (code: number | null) => {
      clearTimeout(timer);
      reject(new Error(`host ${id} exited (${code}) before listening:\n${lines.slice(-20).join('\n')}`));
    };
    child.once('exit', onExit);
    const watch = setInterval(() => {
      const banner = lines.find((l) => l.startsWith('turnwarden serve: listening on '));
      const m = banner === undefined ? null : /listening on (http:\/\/\S+) /.exec(banner);
      if (m === null) return;
      clearInterval(watch);
      clearTimeout(timer);
      child.off('exit', onExit);
      const host: HostProcess = { id, url: m[1]!, child, state: 'running', lines };
      child.once('exit', () => {
        if (host.state === 'running' || host.state === 'paused') host.state = 'exited';
      });
      resolve(host);
    }, 20);
    child.once('exit', () => clearInterval(watch));
  });
}
