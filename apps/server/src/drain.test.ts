/**
 * The drain of a refused body on its own, on a stand-in request (a stream with the fields of an
 * `IncomingMessage` the drain reads) and fake timers: each bound at its edge, the listeners and the
 * timer released however a drain ends, and the server's close ending drains in progress.
 */
import type { IncomingMessage } from 'node:http';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Drains } from './drain.js';

type Fake = PassThrough & { complete: boolean; headers: Record<string, string> };

const request = (headers: Record<string, string> = {}): Fake =>
  Object.assign(new PassThrough(), { complete: false, headers });
const asReq = (r: Fake) => r as unknown as IncomingMessage;
const listeners = (r: Fake) => r.listenerCount('data') + r.listenerCount('end') + r.listenerCount('close');

/** Settles within the current tick, or reports 'pending'. */
async function state(p: Promise<boolean>): Promise<boolean | 'pending'> {
  return Promise.race([p, new Promise<'pending'>((r) => setImmediate(() => r('pending')))]);
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('Drains', () => {
  it('a body read to its end already is drained at once, with nothing attached', async () => {
    const drains = new Drains({ bytes: 10, ms: 1_000 });
    const complete = request();
    complete.complete = true;
    await expect(drains.drain(asReq(complete))).resolves.toBe(true);
    const ended = request();
    ended.end();
    ended.resume();
    await new Promise((r) => ended.once('end', r));
    await expect(drains.drain(asReq(ended))).resolves.toBe(true);
    expect(listeners(complete) + listeners(ended)).toBe(0);
    expect(drains.inProgress).toBe(0);
  });

  it('a destroyed request is not drained, at once', async () => {
    const drains = new Drains({ bytes: 10, ms: 1_000 });
    const r = request();
    r.destroy();
    await new Promise((done) => r.once('close', done)); // its close has been and gone
    expect(await state(drains.drain(asReq(r)))).toBe(false); // at once, not at the timeout
    expect(drains.inProgress).toBe(0);
  });

  it('a declared Content-Length over the bound is given up at once, unread; one exactly at the bound is read', async () => {
    const drains = new Drains({ bytes: 10, ms: 1_000 });
    const over = request({ 'content-length': '11' });
    await expect(drains.drain(asReq(over))).resolves.toBe(false);
    expect(over.readableFlowing).toBe(null); // never resumed: nothing read
    expect(listeners(over)).toBe(0);
    const at = request({ 'content-length': '10' });
    const drained = drains.drain(asReq(at));
    at.end(Buffer.alloc(10));
    await expect(drained).resolves.toBe(true);
  });

  it('reads up to exactly `bytes` and reports the body drained at its end; one byte more gives up; listeners and timer released either way', async () => {
    const drains = new Drains({ bytes: 10, ms: 1_000 });
    const exact = request();
    exact.pause(); // a paused request must be resumed by the drain, not only listened to
    const ok = drains.drain(asReq(exact));
    expect(drains.inProgress).toBe(1);
    exact.write(Buffer.alloc(6));
    exact.end(Buffer.alloc(4));
    await expect(ok).resolves.toBe(true);
    expect(listeners(exact)).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
    expect(drains.inProgress).toBe(0);

    const over = request();
    const refused = drains.drain(asReq(over));
    over.write(Buffer.alloc(11));
    await expect(refused).resolves.toBe(false);
    expect(listeners(over)).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
    expect(drains.inProgress).toBe(0);
  });

  it('a body that stops arriving is given up after exactly `ms`', async () => {
    const drains = new Drains({ bytes: 10, ms: 1_000 });
    const r = request();
    const p = drains.drain(asReq(r));
    r.write(Buffer.alloc(1));
    vi.advanceTimersByTime(999);
    expect(await state(p)).toBe('pending');
    vi.advanceTimersByTime(1);
    expect(await state(p)).toBe(false);
    expect(listeners(r)).toBe(0);
    expect(drains.inProgress).toBe(0);
  });

  it('a connection that closes ends the drain: drained only if the request was complete', async () => {
    const drains = new Drains({ bytes: 10, ms: 1_000 });
    const cut = request();
    const p1 = drains.drain(asReq(cut));
    cut.emit('close');
    expect(await state(p1)).toBe(false);
    const done = request();
    const p2 = drains.drain(asReq(done));
    done.complete = true;
    done.emit('close');
    expect(await state(p2)).toBe(true);
    expect(listeners(cut) + listeners(done)).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('stopAll ends every drain in progress as not drained, and only those', async () => {
    const drains = new Drains({ bytes: 10, ms: 1_000 });
    const finished = request();
    const pf = drains.drain(asReq(finished));
    finished.end();
    await expect(pf).resolves.toBe(true);
    const a = request();
    const b = request();
    const pa = drains.drain(asReq(a));
    const pb = drains.drain(asReq(b));
    expect(drains.inProgress).toBe(2);
    drains.stopAll();
    expect(await state(pa)).toBe(false);
    expect(await state(pb)).toBe(false);
    expect(drains.inProgress).toBe(0);
    expect(listeners(a) + listeners(b)).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });
});
