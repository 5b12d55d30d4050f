/**
 * Typed RPC over a MessagePort (comlink), with the one property comlink lacks: a call whose
 * peer is gone rejects instead of hanging. Every remote call is raced against `gone`, a
 * promise the owner rejects with WORKER_EXITED when the peer thread exits or its port closes.
 */

import type { MessagePort } from 'node:worker_threads';
import * as Comlink from 'comlink';
import { errors, fromWire, toWire } from './errors.js';

/**
 * A Node MessagePort as the DOM-style endpoint comlink speaks (`message` events carrying
 * `{ data }`). Written here rather than loaded from comlink's CommonJS adapter so the worker
 * entry bundles into one ES module.
 */
type Handler = Parameters<Comlink.Endpoint['addEventListener']>[1];
type Event = Parameters<Extract<Handler, (e: never) => unknown>>[0];

function nodeEndpoint(port: MessagePort): Comlink.Endpoint {
  const listeners = new WeakMap<object, (data: unknown) => void>();
  return {
    postMessage: (message, transfer) => port.postMessage(message, transfer as never),
    addEventListener: (_type, handler) => {
      const listener = (data: unknown) => {
        const event = { data } as Event;
        if (typeof handler === 'function') handler(event);
        else handler.handleEvent(event);
      };
      listeners.set(handler, listener);
      port.on('message', listener);
    },
    removeEventListener: (_type, handler) => {
      const listener = listeners.get(handler);
      if (listener === undefined) return;
      listeners.delete(handler);
      port.off('message', listener);
    },
    start: () => port.start(),
  };
}

type AsyncMethods<T> = {
  [K in keyof T]: T[K] extends (...args: infer A) => Promise<infer R> ? (...args: A) => Promise<R> : never;
};

/** Serves `api` on `port`. Thrown errors cross as wire errors (plain data with a code). */
export function serve<T extends object>(port: MessagePort, api: T): void {
  const wrapped: Record<string, unknown> = {};
  for (const key of Object.keys(api) as (keyof T & string)[]) {
    const fn = api[key];
    if (typeof fn !== 'function') continue;
    wrapped[key] = async (...args: unknown[]) => {
      try {
        return { ok: true, value: await (fn as (...a: unknown[]) => unknown).apply(api, args) };
      } catch (e) {
        return { ok: false, error: toWire(e) };
      }
    };
  }
  Comlink.expose(wrapped, nodeEndpoint(port));
}

/**
 * A client for an api served on `port`. Each call rejects with the remote TurnwardenError, or
 * with whatever `gone` rejects with once the peer is gone (never hangs).
 */
export function client<T extends object>(port: MessagePort, gone: Promise<never>): AsyncMethods<T> {
  // The rejection is observed per call; keep the shared promise from being reported unhandled.
  gone.catch(() => {});
  const remote = Comlink.wrap<Record<string, (...a: unknown[]) => Promise<unknown>>>(nodeEndpoint(port));
  return new Proxy({} as AsyncMethods<T>, {
    get(_target, key) {
      if (typeof key !== 'string' || key === 'then') return undefined;
      return async (...args: unknown[]) => {
        const reply = (await Promise.race([remote[key]!(...args), gone])) as
          | { ok: true; value: unknown }
          | { ok: false; error: unknown };
        if (!reply.ok) throw fromWire(reply.error);
        return reply.value;
      };
    },
  });
}

/** A `gone` promise and the function that rejects it. */
export function goneSignal(): { gone: Promise<never>; markGone: (reason: string) => void } {
  let reject!: (e: unknown) => void;
  const gone = new Promise<never>((_, r) => {
    reject = r;
  });
  gone.catch(() => {});
  return {
    gone,
    markGone: (reason) => reject(errors.workerExited(reason)),
  };
}
