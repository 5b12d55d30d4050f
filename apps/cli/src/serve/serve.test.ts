/**
 * `turnwarden serve` as a real process: it listens, refuses a request without its token, and a
 * SIGTERM in the middle of a turn — a tool call running — ends the process cleanly within the
 * grace bound and leaves a structurally complete history (S1, S2) in the database file.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openToolCalls } from '@turnwarden/protocol';
import { openSqliteStore } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';

const MAIN = fileURLToPath(new URL('../../dist/main.js', import.meta.url));
const TOKEN = 'serve-test-token-0123456789';
let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } catch (e) {
    expect.fail((e as Error).message);
  } finally {
    clearTimeout(timer);
  }
}

describe('turnwarden serve', () => {
  it('S1 S2: SIGTERM mid-turn ends the server within its grace bound and leaves a complete history', async () => {
    dir = mkdtempSync(join(tmpdir(), 'tw-serve-'));
    const db = join(dir, 'serve.db');
    const config = join(dir, 'config.json');
    writeFileSync(
      config,
      JSON.stringify({
        shutdownGraceMs: 300,
        logLevel: 'silent',
        tokens: [{ token: TOKEN, tenantId: 'acme', principal: 'alice' }],
        runtime: {
          watchdog: { timeoutMs: 5_000, pollMs: 100, graceMs: 500 },
          pool: { maxWorkers: 2, warmWorkers: 1 },
        },
      }),
    );
    const child = spawn(process.execPath, [MAIN, 'serve', '--port', '0', '--db', db, '--config', config], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.setEncoding('utf8');
    const url = await within(
      new Promise<string>((resolve) => {
        child.stdout.on('data', (s: string) => {
          out += s;
          const m = /listening on (http:\/\/[^\s]+) /.exec(out);
          if (m) resolve(m[1]!);
        });
      }),
      20_000,
      'the server prints its address',
    );
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const api = (path: string, init: RequestInit = {}) =>
      fetch(`${url}/v1${path}`, {
        ...init,
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', ...init.headers },
      });
    expect((await fetch(`${url}/v1/workstreams`)).status).toBe(401);
    expect(
      (await api('/workstreams', { method: 'POST', body: JSON.stringify({ workstreamId: 'w1' }) })).status,
    ).toBe(201);
    // A turn whose tool call sleeps for a minute: running when the SIGTERM comes.
    const content = JSON.stringify({
      script: [{ tools: [{ name: 'sleep', args: { ms: 60_000 } }] }, { text: 'never' }],
    });
    expect(
      (await api('/workstreams/w1/messages', { method: 'POST', body: JSON.stringify({ content }) })).status,
    ).toBe(202);
    // The SIGTERM must find the tool running: wait until the model's tool call is history (on a
    // loaded machine the 202 can come long before the turn reaches its tool).
    const toolCalled = async () => {
      for (;;) {
        const page = (await (await api('/workstreams/w1/history')).json()) as {
          rows: { message: { role: string } }[];
        };
        if (page.rows.some((r) => r.message.role === 'assistant')) return;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    await within(toolCalled(), 15_000, 'the turn calls its tool');
    const t0 = Date.now();
    child.kill('SIGTERM');
    expect(await within(exited, 15_000, 'the server exits after SIGTERM')).toBe(0);
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(out).toMatch(/shutting down/);
    const store = openSqliteStore({ path: db });
    try {
      const rows = await store.readHistory('acme/w1');
      expect(openToolCalls(rows)).toEqual([]);
      expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool']);
      expect(rows.at(-1)?.message).toMatchObject({ role: 'tool', effect: 'unknown', synthesized: true });
    } finally {
      await store.close();
    }
  }, 60_000);
});
