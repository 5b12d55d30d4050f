/**
 * The PostgreSQL store's LISTEN/NOTIFY connection (pg-listener.ts) on its own, against the
 * throwaway cluster: delivery to every subscriber of a channel and to no other, the UNLISTEN
 * when a channel's last subscriber goes, the reconnect after the connection is killed (every
 * channel listened to again, every subscriber told to resync), and close. The listener's
 * backend is found by its `application_name` in `pg_stat_activity`, whose `query` column is the
 * last statement it ran. Skipped, saying why, where no PostgreSQL is installed.
 */
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { isChannelName, PgListener, type Schedule } from './pg-listener.js';
import { startPostgres } from './test-support/postgres.js';
import { freezableProxy } from './test-support/proxy.js';

const started = await startPostgres();
if ('skip' in started) process.stdout.write(`pg-listener.test.ts: skipped — ${started.skip}\n`);
const url = 'skip' in started ? '' : started.url;

const admin = new pg.Client({ connectionString: url });
if (!('skip' in started)) await admin.connect();
afterAll(async () => {
  if (!('skip' in started)) {
    await admin.end();
    started.stop();
  }
});

/** A fresh listener under a name of its own, and what its backend last ran. */
function listener(connectionString = url, schedule?: Schedule) {
  const name = `twl_${randomUUID().slice(0, 8)}`;
  const l = new PgListener({ connectionString, application_name: name }, schedule);
  const backend = async () => {
    const { rows } = await admin.query<{ pid: number; query: string }>(
      'SELECT pid, query FROM pg_stat_activity WHERE application_name = $1',
      [name],
    );
    return rows;
  };
  return { l, name, backend };
}

const notify = (channel: string, payload?: string) =>
  payload === undefined
    ? admin.query(`NOTIFY ${channel}`)
    : admin.query('SELECT pg_notify($1, $2)', [channel, payload]);

/** Until `test` holds (bounded: a notification crosses a loopback connection in milliseconds). */
async function until(test: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await test())) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * Notifications reach a listening session in the order they were committed: once a sentinel
 * sent after them has arrived, any of them that was going to arrive has.
 */
async function sentinel(l: PgListener): Promise<void> {
  let arrived = false;
  const off = await l.listen('tw_sentinel', () => {
    arrived = true;
  });
  await notify('tw_sentinel', 's');
  await until(() => arrived, 'the sentinel');
  await off();
}

describe.skipIf('skip' in started)('PgListener (LISTEN/NOTIFY on one dedicated connection)', () => {
  it('a channel name is a lower-case identifier of at most 63 characters', () => {
    expect(['a', 'tw_events', '_x1', 'a'.repeat(63)].map(isChannelName)).toEqual([true, true, true, true]);
    expect(['', 'A', '1a', 'a-b', 'a b', 'a'.repeat(64), 7, undefined].map(isChannelName)).toEqual(
      Array(8).fill(false),
    );
  });

  it('every subscriber of a channel gets its payloads, in order, and nothing of other channels; a throwing subscriber harms no other', async () => {
    const { l, backend } = listener();
    const got: Record<string, string[]> = { first: [], second: [], other: [] };
    await l.listen('tw_a', () => {
      throw new Error('a subscriber with a bug');
    });
    await l.listen('tw_a', (p) => void got.first!.push(p));
    await l.listen('tw_a', (p) => void got.second!.push(p));
    await l.listen('tw_b', (p) => void got.other!.push(p));
    // One connection carries them all.
    expect(await backend()).toHaveLength(1);
    await notify('tw_a', 'one');
    await notify('tw_a', 'two');
    await notify('tw_a'); // no payload: an empty string
    await notify('tw_c', 'nobody listens');
    await sentinel(l);
    expect(got).toEqual({ first: ['one', 'two', ''], second: ['one', 'two', ''], other: [] });
    await l.close();
  });

  it('an unsubscribe stops that subscriber alone; the last one of a channel UNLISTENs it; a second call does nothing', async () => {
    const { l, backend } = listener();
    const got: string[][] = [[], []];
    const off0 = await l.listen('tw_u', (p) => void got[0]!.push(p));
    const off1 = await l.listen('tw_u', (p) => void got[1]!.push(p));
    expect((await backend())[0]?.query).toBe('LISTEN tw_u');
    await off0();
    await off0(); // twice: nothing more
    // The channel still has a subscriber: no UNLISTEN.
    expect((await backend())[0]?.query).toBe('LISTEN tw_u');
    await notify('tw_u', 'after one left');
    await sentinel(l);
    expect(got).toEqual([[], ['after one left']]);
    await off1();
    expect((await backend())[0]?.query).toBe('UNLISTEN tw_u');
    await notify('tw_u', 'after both left');
    await sentinel(l);
    expect(got).toEqual([[], ['after one left']]);
    // Listening again LISTENs again.
    const again: string[] = [];
    await l.listen('tw_u', (p) => void again.push(p));
    expect((await backend())[0]?.query).toBe('LISTEN tw_u');
    await notify('tw_u', 'back');
    await until(() => again.length === 1, 'the payload after listening again');
    await l.close();
  });

  it('a killed connection is reconnected: every channel listened to again, every subscriber told to resync, payloads flow again', async () => {
    const { l, backend } = listener();
    const got: string[] = [];
    const resyncs: string[] = [];
    await l.listen(
      'tw_r1',
      (p) => void got.push(`r1:${p}`),
      () => void resyncs.push('r1'),
    );
    await l.listen(
      'tw_r2',
      (p) => void got.push(`r2:${p}`),
      () => void resyncs.push('r2'),
    );
    await l.listen('tw_r2', (p) => void got.push(`r2b:${p}`)); // no resync of its own
    const [before] = await backend();
    await admin.query('SELECT pg_terminate_backend($1)', [before!.pid]);
    // Reconnected (a new backend) after its first backoff, and both channels listened to again.
    await until(async () => {
      const now = await backend();
      return now.length === 1 && now[0]!.pid !== before!.pid && now[0]!.query === 'LISTEN tw_r2';
    }, 'the reconnect');
    await until(() => resyncs.length === 2, 'the resyncs');
    expect(resyncs.sort()).toEqual(['r1', 'r2']);
    await notify('tw_r1', 'x');
    await notify('tw_r2', 'y');
    await until(() => got.length === 3, 'payloads after the reconnect');
    expect(got.sort()).toEqual(['r1:x', 'r2:y', 'r2b:y']);
    await l.close();
  });

  it('a subscribe while the reconnect waits out its backoff reconnects at once, for every channel', async () => {
    // The backoff's timer never fires here: only the subscribe can reconnect.
    let scheduled = 0;
    const { l, backend } = listener(url, () => {
      scheduled++;
      return () => {};
    });
    const got: string[] = [];
    let resyncs = 0;
    await l.listen(
      'tw_p1',
      (p) => void got.push(`p1:${p}`),
      () => void resyncs++,
    );
    const [before] = await backend();
    await admin.query('SELECT pg_terminate_backend($1)', [before!.pid]);
    await until(() => scheduled === 1, 'the loss noticed, a retry scheduled');
    // Within the backoff: this subscribe connects now and listens to both channels.
    await l.listen('tw_p2', (p) => void got.push(`p2:${p}`));
    await notify('tw_p1', 'a');
    await notify('tw_p2', 'b');
    await sentinel(l);
    expect(got.sort()).toEqual(['p1:a', 'p2:b']);
    expect(resyncs).toBe(1);
    expect(await backend()).toHaveLength(1);
    await l.close();
  });

  it('a subscribe whose LISTEN meets a connection dying under it (its end not yet seen) reconnects and listens to every channel', async () => {
    const proxy = await freezableProxy(url);
    const { l, backend } = listener(proxy.url);
    const got: string[] = [];
    let resyncs = 0;
    await l.listen(
      'tw_q1',
      (p) => void got.push(`q1:${p}`),
      () => void resyncs++,
    );
    const [before] = await backend();
    // The server's FATAL and close are held back: the listener still takes its connection for live.
    proxy.freeze();
    await admin.query('SELECT pg_terminate_backend($1)', [before!.pid]);
    await until(async () => (await backend()).length === 0, 'the backend gone');
    // This LISTEN goes out on the dead connection, whose FATAL then answers it.
    await l.listen('tw_q2', (p) => void got.push(`q2:${p}`));
    const [after] = await backend();
    expect(after!.pid).not.toBe(before!.pid);
    expect(resyncs).toBe(1);
    await notify('tw_q1', 'a');
    await notify('tw_q2', 'b');
    await until(() => got.length === 2, 'both channels served');
    expect(got.sort()).toEqual(['q1:a', 'q2:b']);
    await l.close();
    proxy.close();
  });

  it('reconnects with backoff — 100 ms doubling to 5 s while the server refuses it — and from 100 ms again once it is back', async () => {
    const proxy = await freezableProxy(url);
    // The listener's timers, fired by the test: each entry is a delay it asked for.
    const delays: number[] = [];
    const due: (() => void)[] = [];
    const name = `twl_${randomUUID().slice(0, 8)}`;
    const l = new PgListener({ connectionString: proxy.url, application_name: name }, (fn, ms) => {
      delays.push(ms);
      due.push(fn);
      return () => {
        const at = due.indexOf(fn);
        if (at >= 0) due.splice(at, 1);
      };
    });
    try {
      const got: string[] = [];
      let resyncs = 0;
      await l.listen(
        'tw_b1',
        (p) => void got.push(p),
        () => void resyncs++,
      );
      proxy.cut();
      await until(() => delays.length === 1, 'the first retry scheduled');
      // Each failed reconnect doubles the wait, up to 5 s.
      for (let i = 1; i < 8; i++) {
        due.shift()!();
        await until(() => delays.length === i + 1, `retry ${i + 1} scheduled`);
      }
      expect(delays).toEqual([100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]);
      expect(resyncs).toBe(0);
      proxy.restore();
      due.shift()!();
      await until(() => resyncs === 1, 'the reconnect');
      expect(due).toHaveLength(0);
      await notify('tw_b1', 'after');
      await until(() => got.length === 1, 'a payload after the reconnect');
      // The next loss starts from 100 ms again.
      proxy.cut();
      await until(() => delays.length === 9, 'the retry after the next loss');
      expect(delays[8]).toBe(100);
      await l.close();
      // Closed: its pending retry is cancelled.
      expect(due).toHaveLength(0);
    } finally {
      await l.close();
      proxy.close();
    }
  });

  it('close ends the connection; a later subscribe is refused; close twice is fine', async () => {
    const { l, backend } = listener();
    const got: string[] = [];
    await l.listen('tw_c1', (p) => void got.push(p));
    await l.close();
    // Its backend is gone: nothing can reach it any more.
    expect(await backend()).toEqual([]);
    await expect(l.listen('tw_c1', () => {})).rejects.toThrow('the listener is closed');
    await l.close();
  });

  it('a close while the connection is being made: the subscribe is refused and the new connection ends — nothing outlives the store', async () => {
    // A gate in front of the cluster: the connection is accepted, and nothing crosses until let through.
    let open: () => void = () => undefined;
    const opened = new Promise<void>((r) => {
      open = r;
    });
    let arrived: () => void = () => undefined;
    const connecting = new Promise<void>((r) => {
      arrived = r;
    });
    const target = new URL(url);
    const gate = net.createServer((client) => {
      arrived();
      void opened.then(() => {
        const upstream = net.connect(Number(target.port), target.hostname);
        client.pipe(upstream).pipe(client);
        client.on('close', () => upstream.destroy());
        upstream.on('close', () => client.destroy());
      });
    });
    await new Promise<void>((r) => gate.listen(0, '127.0.0.1', r));
    const gated = new URL(url);
    gated.port = String((gate.address() as net.AddressInfo).port);
    const { l, backend } = listener(gated.toString());
    try {
      const subscribed = l.listen('tw_g1', () => {});
      subscribed.catch(() => undefined);
      await connecting;
      const closed = l.close();
      open();
      await expect(subscribed).rejects.toThrow('the listener is closed');
      await closed;
      // Its backend, which did start once the gate opened, is gone again.
      await until(async () => (await backend()).length === 0, 'the connection made during close ended');
    } finally {
      await l.close();
      gate.close();
    }
  });
});
