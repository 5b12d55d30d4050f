/**
 * Child processes of the bench and of `turnwarden scale`: a measuring child forked for one
 * report (`runChild`, like the memory section's), and a long-lived helper child answering
 * requests over IPC (`startHelper`: the other-process timer, the loopback server). Every wait
 * has a bound: a child that does not answer in time is killed and the call rejects.
 */
import { type ChildProcess, fork } from 'node:child_process';

/** What a measuring child sends once, before it exits. */
type ChildReport<R> =
  | { readonly ok: true; readonly report: R }
  | { readonly ok: false; readonly error: string };

export interface ForkOptions {
  /** Start the child with --expose-gc (readings after full collections). */
  readonly exposeGc?: boolean;
  /** Extra environment for the child. */
  readonly env?: Readonly<Record<string, string>>;
}

function execArgv(exposeGc: boolean): string[] {
  const inherited = process.execArgv.filter((a) => a !== '--expose-gc');
  return exposeGc ? [...inherited, '--expose-gc'] : inherited;
}

function spawnChild(
  file: string,
  cfg: unknown,
  opts: ForkOptions,
): { child: ChildProcess; stderr: () => string } {
  const child = fork(file, [JSON.stringify(cfg)], {
    execArgv: execArgv(opts.exposeGc === true),
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    ...(opts.env === undefined ? {} : { env: { ...process.env, ...opts.env } }),
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    if (stderr.length < 8000) stderr += chunk.toString('utf8');
  });
  return { child, stderr: () => stderr.trim().slice(-800) };
}

/** Forks `file` with `cfg` as its argument; resolves with the report it sends before it exits. */
export function runChild<R>(
  label: string,
  file: string,
  cfg: unknown,
  timeoutMs: number,
  opts: ForkOptions = {},
): Promise<R> {
  return new Promise((resolve, reject) => {
    const { child, stderr } = spawnChild(file, cfg, opts);
    let message: ChildReport<R> | undefined;
    child.on('message', (m) => {
      message = m as ChildReport<R>;
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${label}: the child did not finish within ${Math.round(timeoutMs / 1000)} s`));
    }, timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (message?.ok) resolve(message.report);
      else if (message) reject(new Error(`${label}: ${message.error}`));
      else reject(new Error(`${label}: the child exited (${signal ?? code}) without a report: ${stderr()}`));
    });
  });
}

/** The measuring child's side: sends its report (or its error) and lets the process end. */
export async function reportToParent<R>(measure: () => Promise<R>): Promise<void> {
  let message: ChildReport<R>;
  try {
    message = { ok: true, report: await measure() };
  } catch (e) {
    message = { ok: false, error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) };
  }
  await new Promise<void>((resolve) => {
    if (!process.send) resolve();
    else process.send(message, undefined, {}, () => resolve());
  });
  process.disconnect?.();
}

/** A helper child that stays up and answers requests: `{ id, ... }` → `{ id, ... }`. */
export interface Helper<Ready> {
  readonly ready: Ready;
  request<T>(body: Record<string, unknown>, timeoutMs: number): Promise<T>;
  close(): Promise<void>;
}

/** Forks a helper; resolves once it sent `{ ready: … }`, within `timeoutMs`. */
export function startHelper<Ready>(
  label: string,
  file: string,
  cfg: unknown,
  timeoutMs: number,
): Promise<Helper<Ready>> {
  const { child, stderr } = spawnChild(file, cfg, {});
  const waiting = new Map<number, (m: unknown) => void>();
  let nextId = 1;
  let exited = false;
  const exit = new Promise<void>((resolve) => {
    child.once('exit', () => {
      exited = true;
      resolve();
    });
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${label}: not ready within ${Math.round(timeoutMs / 1000)} s`));
    }, timeoutMs);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${label}: exited (${signal ?? code}) before it was ready: ${stderr()}`));
    });
    child.on('message', (raw) => {
      const m = raw as { ready?: Ready; id?: number };
      if (m.ready !== undefined) {
        clearTimeout(timer);
        resolve({
          ready: m.ready,
          request: <T>(body: Record<string, unknown>, ms: number) =>
            new Promise<T>((res, rej) => {
              if (exited) {
                rej(new Error(`${label}: the child has exited`));
                return;
              }
              const id = nextId++;
              const t = setTimeout(() => {
                waiting.delete(id);
                rej(new Error(`${label}: no answer within ${ms} ms`));
              }, ms);
              waiting.set(id, (answer) => {
                clearTimeout(t);
                res(answer as T);
              });
              child.send({ ...body, id });
            }),
          close: async () => {
            if (exited) return;
            child.disconnect();
            const gone = await Promise.race([exit.then(() => true), sleepFor(5_000).then(() => false)]);
            if (!gone) child.kill('SIGKILL');
          },
        });
        return;
      }
      if (m.id !== undefined) {
        const answer = waiting.get(m.id);
        waiting.delete(m.id);
        answer?.(m);
      }
    });
  });
}

function sleepFor(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/** A time both processes agree on (ms since the epoch, sub-millisecond): for windows across processes. */
export function epochNow(): number {
  return performance.timeOrigin + performance.now();
}
