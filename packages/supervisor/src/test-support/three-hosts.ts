/**
 * Three runtimes with host ids on one in-memory SQLite store and an in-memory notification
 * channel (memory-channel.ts): a cluster in one process, for the tests of what crosses hosts.
 * `stop` (after each test) opens and closes the gates the test took, shuts the hosts down and
 * closes the store.
 */
import { openSqliteStore, type Store } from '@turnwarden/store';
import type { EventRelay } from '../cluster/relay.js';
import { type Gate, gate } from './gate.js';
import { MemoryChannelBus } from './memory-channel.js';
import { startRuntime } from './runtime.js';

export type Host = Awaited<ReturnType<typeof startRuntime>>;

export function threeHostCluster() {
  const running: Host[] = [];
  const gates: Gate[] = [];
  let store: Store | undefined;
  return {
    /**
     * Hosts A, B and C; `wrapB` wraps host B's view of the store (a gate on one of its methods);
     * `relay` makes each host's event relay (default: the channel's).
     */
    async start(
      options: Parameters<typeof startRuntime>[0] = {},
      wrapB: (view: Store) => Store = (view) => view,
      relay?: () => EventRelay,
    ): Promise<{ a: Host; b: Host; c: Host; bus: MemoryChannelBus; store: Store }> {
      const shared = openSqliteStore({ path: ':memory:' });
      store = shared;
      const bus = new MemoryChannelBus();
      const own = () => (relay === undefined ? {} : { relay: relay() });
      const a = await startRuntime({ ...options, ...own(), store: bus.view(shared), hostId: 'host-a' });
      running.push(a);
      const b = await startRuntime(
        { ...options, ...own(), store: wrapB(bus.view(shared)), hostId: 'host-b' },
        { existing: true },
      );
      running.push(b);
      const c = await startRuntime(
        { ...options, ...own(), store: bus.view(shared), hostId: 'host-c' },
        { existing: true },
      );
      running.push(c);
      return { a, b, c, bus, store: shared };
    },
    /** A gate for a `gated` tool, opened and closed after the test. */
    gate(): Gate {
      const g = gate();
      gates.push(g);
      return g;
    },
    /** A host the test shut down itself. */
    forget(rt: Host): void {
      running.splice(running.indexOf(rt), 1);
    },
    async stop(): Promise<void> {
      for (const g of gates.splice(0)) {
        g.open();
        g.close();
      }
      for (const rt of running.splice(0)) await rt.tw.shutdown();
      await store?.close();
      store = undefined;
    },
  };
}
