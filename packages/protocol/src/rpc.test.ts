import { MessageChannel, Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCode } from './error-codes.js';
import { isTurnwardenError } from './errors.js';
import { client, goneSignal } from './rpc.js';

interface Api {
  echo(x: number): Promise<number>;
  hang(): Promise<never>;
  fail(): Promise<void>;
}

let worker: Worker | undefined;
afterEach(async () => {
  await worker?.terminate();
  worker = undefined;
});

function start() {
  const { port1, port2 } = new MessageChannel();
  worker = new Worker(new URL('./test-support/rpc-worker.mjs', import.meta.url), {
    workerData: { port: port2 },
    transferList: [port2],
  });
  const { gone, markGone } = goneSignal();
  worker.once('exit', (code) => markGone(`worker exited with code ${code}`));
  return client<Api>(port1, gone);
}

describe('rpc across threads', () => {
  it('round-trips values and rebuilds typed errors on the calling side', async () => {
    const api = start();
    expect(await api.echo(41)).toBe(41);
    const e = await api.fail().catch((err: unknown) => err);
    expect(isTurnwardenError(e, ErrorCode.TOOL_ERROR)).toBe(true);
    expect(e).toMatchObject({ message: 'no such thing', details: { why: 'test' } });
  });

  it('a call pending when the worker is killed rejects with WORKER_EXITED instead of hanging', async () => {
    const api = start();
    expect(await api.echo(1)).toBe(1);
    const pending = api.hang();
    await worker!.terminate();
    const e = await pending.catch((err: unknown) => err);
    expect(isTurnwardenError(e, ErrorCode.WORKER_EXITED)).toBe(true);
    // And every later call rejects at once.
    expect(isTurnwardenError(await api.echo(2).catch((err: unknown) => err), ErrorCode.WORKER_EXITED)).toBe(
      true,
    );
  });
});
