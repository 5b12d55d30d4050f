/**
 * A supervisor process killed mid-turn: crash-host.mjs runs a turn into tool-debt on a SQLite
 * file and is killed with SIGKILL there, leaving the machine mid-turn and its lease unreleased.
 */
import { spawn } from 'node:child_process';
import { openSqliteStore } from '@turnwarden/store';
import { expect } from 'vitest';
import { within } from './bounded.js';

/** Runs the crash host (lease ttl `leaseTtlMs`) until it reports tool-debt, then kills it with SIGKILL. */
export async function killInToolDebt(dbPath: string, leaseTtlMs = 1_000, hostId?: string): Promise<void> {
  const child = spawn(
    process.execPath,
    [
      new URL('./crash-host.mjs', import.meta.url).pathname,
      dbPath,
      String(leaseTtlMs),
      ...(hostId === undefined ? [] : [hostId]),
    ],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const exited = new Promise<NodeJS.Signals | null>((resolve) =>
    child.once('exit', (_code, signal) => resolve(signal)),
  );
  await within(
    new Promise<void>((resolve) => {
      child.stdout.on('data', (chunk: Buffer) => {
        if (chunk.toString().includes('IN_TOOL_DEBT')) resolve();
      });
    }),
    20_000,
    'the host process reaches tool-debt',
  );
  child.kill('SIGKILL');
  expect(await exited).toBe('SIGKILL');
}

/**
 * Runs approval-host.mjs until its turn waits for an approval, then kills it with SIGKILL;
 * resolves with the wait's token.
 */
export async function killAwaitingApproval(dbPath: string): Promise<string> {
  const child = spawn(process.execPath, [new URL('./approval-host.mjs', import.meta.url).pathname, dbPath], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<NodeJS.Signals | null>((resolve) =>
    child.once('exit', (_code, signal) => resolve(signal)),
  );
  const token = await within(
    new Promise<string>((resolve) => {
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const m = /AWAITING (\S+)\n/.exec(out);
        if (m) resolve(m[1]!);
      });
    }),
    20_000,
    'the host process ends its turn waiting for approval',
  );
  child.kill('SIGKILL');
  expect(await exited).toBe('SIGKILL');
  return token;
}

/** The lease of tenant-a's ws-1 as the database holds it, read through a connection of its own. */
export async function leaseOf(dbPath: string) {
  const probe = openSqliteStore({ path: dbPath });
  try {
    return await probe.getLease('tenant-a/ws-1');
  } finally {
    await probe.close();
  }
}
