/**
 * Several "hosts" in one process for the cluster tests: each gets the same store behind a view
 * that adds a notification channel shared by all of them — what PostgreSQL's LISTEN/NOTIFY gives
 * the real store (delivered asynchronously, in order, to every listener, the sender included).
 */
import type { HistoryRow } from '@turnwarden/protocol';
import type { Store } from '@turnwarden/store';

type Handler = (payload: string) => void;

export class MemoryChannelBus {
  private readonly listeners = new Map<string, Set<Handler>>();
  /** Every notification, in order (channel, payload). */
  readonly sent: { channel: string; payload: string }[] = [];
  /** While true, notifications are dropped (a partition of the channel). */
  dropping = false;

  /** The store as one host sees it: the same data, plus the shared channel. */
  view(store: Store): Store {
    const notify = (channel: string, payload: string): Promise<void> => {
      this.sent.push({ channel, payload });
      if (this.dropping) return Promise.resolve();
      const targets = [...(this.listeners.get(channel) ?? [])];
      setImmediate(() => {
        for (const h of targets) h(payload);
      });
      return Promise.resolve();
    };
    const listen = (channel: string, onPayload: Handler): Promise<() => Promise<void>> => {
      let set = this.listeners.get(channel);
      if (set === undefined) {
        set = new Set();
        this.listeners.set(channel, set);
      }
      set.add(onPayload);
      return Promise.resolve(async () => {
        set.delete(onPayload);
      });
    };
    const readHistoryAfter = async (workstreamId: string, afterSeq: number): Promise<HistoryRow[]> =>
      (await store.readHistory(workstreamId)).filter((r) => r.seq > afterSeq);
    const extra: Record<string, unknown> = {
      notify,
      listen,
      readHistoryAfter,
      close: () => Promise.resolve(),
    };
    return new Proxy(store, {
      get(target, key, receiver) {
        if (typeof key === 'string' && key in extra) return extra[key];
        const value = Reflect.get(target, key, receiver) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
  }
}
