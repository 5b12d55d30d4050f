/**
 * (Over 300 lines on purpose, for now: routing, following and the failover sweep share one
 * channel, its cursors and the holder's identity; they split along those three seams when the
 * supervisor gets its folders — issue 23, item 3.)
 *
 * Several hosts on one store (issue 13). Each supervisor process is a host with a stable id;
 * a workstream's turn runs on whichever host holds its turn lease, and fencing tokens (P6) keep
 * a host that lost the lease from writing. What crosses hosts goes through the store's own
 * notification channel (PostgreSQL LISTEN/NOTIFY), never a side channel of ours:
 *
 * - **Routing.** A cancel, close or delete called on a host that does not hold the workstream's
 *   live lease is sent to the holder, which runs it as if called there and answers. When the
 *   holder does not answer and its lease is not renewed — it died, or it is paused past its
 *   lease — the call runs here once the lease has expired (a cancel then repairs: S7, C5). A
 *   holder that keeps renewing without answering is a TIMEOUT after `maxRounds` periods.
 * - **Relaying.** Every event a host authors goes to the event relay (relay.ts): the store's
 *   channel by default, a broker when the host is given one. Other hosts put them in their rings
 *   under the author's id and deliver them to their listeners — tokens, tool progress, warnings,
 *   rows (`message`), closes (D6) and rewrites (E2's resync) — so a listener follows a turn
 *   running anywhere, and resumes by its last event id on any host (E1).
 * - **Failover.** Every `lease.renewMs` the host looks for expired, unreleased leases of other
 *   holders — a host that died mid-turn — and repairs those sessions (S7): one host wins the
 *   lease, the others find it taken.
 *
 * Cluster mode is on when the store offers a notification channel (`notify`/`listen`) and the
 * host has an id (`hostId`).
 */
import { randomUUID } from 'node:crypto';
import { ErrorCode, errors, fromWire, isTurnwardenError, toWire, type WireError } from '@turnwarden/protocol';
import type { Lease, Store } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { CancelTimer, Timers } from '../liveness/timers.js';
import type { Earlier, EventHub, TurnwardenEvent } from '../streams/events.js';
import { ChannelRelay, type EventRelay, type RelayChannel, type RelayedBatch, validEvent } from './relay.js';

/** What a store offers for several hosts: notifications (delivered after commit) and tail reads. */
export type ClusterChannel = RelayChannel;

export function channelOf(store: Store): ClusterChannel | undefined {
  const s = store as Partial<ClusterChannel>;
  return typeof s.notify === 'function' &&
    typeof s.listen === 'function' &&
    typeof s.readHistoryAfter === 'function'
    ? (store as unknown as ClusterChannel)
    : undefined;
}

/** The channels every host listens on. */
const CONTROL_CHANNEL = 'turnwarden_control';

export type RoutedOp =
  /**
   * With `generation`: that turn only, not a later one (a queued send's handle, C4). With
   * `keepFrom` (an interrupt, M3): the sends queued from that row on are not revoked.
   */
  | { readonly op: 'cancel'; readonly generation?: number; readonly keepFrom?: number }
  | { readonly op: 'close'; readonly waitMs: number }
  | { readonly op: 'delete'; readonly tenantId: string; readonly incarnation: string };

/** A routed call's answer: its result or error, or `stale` — the holder no longer holds that lease. */
interface Reply {
  readonly k: 'rep';
  readonly id: string;
  readonly to: string;
  readonly ok: boolean;
  readonly stale?: boolean;
  readonly result?: unknown;
  readonly error?: WireError;
}

type ControlMessage =
  | ({
      readonly k: 'req';
      readonly id: string;
      readonly to: string;
      readonly from: string;
      readonly ws: string;
      /** The lease the call was routed by: served only while the holder still holds it. */
      readonly token: number;
    } & RoutedOp)
  | Reply
  /** Rows of sends the host `to` queued durably changed (durable-sends.ts). */
  | { readonly k: 'sendq'; readonly to: string; readonly ids: readonly number[] }
  /** Turns of these tenants ended on host `from` (T4 across hosts: sends waiting on them claim again). */
  | { readonly k: 'freed'; readonly from: string; readonly tenants: readonly string[] }
  /** A call of `ws` waits for approval until `expiresAt` (A4: every host keeps the wait's timeout). */
  | {
      readonly k: 'wait';
      readonly from: string;
      readonly ws: string;
      readonly nonce: string;
      readonly expiresAt: number;
    }
  /** The wait `nonce` of `ws` ended on host `from` (decided, cancelled): its timeout goes everywhere. */
  | { readonly k: 'waited'; readonly from: string; readonly ws: string; readonly nonce: string };

const shuttingDown = () => errors.shuttingDown('turnwarden is shutting down');

const isText = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= 512;

/** Any database user can NOTIFY: a payload that is not one of ours is dropped, never trusted. */
function parseControl(payload: string): ControlMessage | undefined {
  let m: unknown;
  try {
    m = JSON.parse(payload);
  } catch {
    return undefined;
  }
  if (typeof m !== 'object' || m === null) return undefined;
  const r = m as Record<string, unknown>;
  switch (r.k) {
    case 'rep':
      return isText(r.id) && isText(r.to) && typeof r.ok === 'boolean' ? (m as Reply) : undefined;
    case 'req':
      if (!isText(r.id) || !isText(r.to) || !isText(r.from) || !isText(r.ws)) return undefined;
      if (typeof r.token !== 'number') return undefined;
      if (r.op === 'cancel')
        return (r.generation === undefined || Number.isSafeInteger(r.generation)) &&
          (r.keepFrom === undefined || Number.isSafeInteger(r.keepFrom))
          ? (m as ControlMessage)
          : undefined;
      if (r.op === 'close') return typeof r.waitMs === 'number' ? (m as ControlMessage) : undefined;
      if (r.op === 'delete')
        return isText(r.tenantId) && isText(r.incarnation) ? (m as ControlMessage) : undefined;
      return undefined;
    case 'freed':
      return isText(r.from) && Array.isArray(r.tenants) && r.tenants.length <= 500 && r.tenants.every(isText)
        ? (m as ControlMessage)
        : undefined;
    case 'wait':
      return isText(r.from) && isText(r.ws) && isText(r.nonce) && Number.isSafeInteger(r.expiresAt)
        ? (m as ControlMessage)
        : undefined;
    case 'waited':
      return isText(r.from) && isText(r.ws) && isText(r.nonce) ? (m as ControlMessage) : undefined;
    case 'sendq':
      return isText(r.to) &&
        Array.isArray(r.ids) &&
        r.ids.length <= 500 &&
        r.ids.every((id) => Number.isSafeInteger(id) && (id as number) > 0)
        ? (m as ControlMessage)
        : undefined;
    default:
      return undefined;
  }
}

export interface ClusterHost {
  readonly store: Store;
  readonly holder: string;
  readonly hostId: string;
  /** The holder prefix of this host's earlier processes. */
  readonly predecessors: string | undefined;
  readonly events: EventHub;
  readonly timers: Timers;
  readonly logger: Logger;
  readonly lease: { readonly ttlMs: number; readonly renewMs: number };
  /** Whether a turn of the workstream runs on this host. */
  runsHere(workstreamId: string): boolean;
  /** Runs a routed call here, as if called on this host. */
  runLocally(workstreamId: string, op: RoutedOp): Promise<unknown>;
  /** Repairs a session left with debt (S7); true when it did. LEASED_ELSEWHERE when another holds it. */
  repairIfLeft(workstreamId: string): Promise<boolean>;
  /** Sends a dead holder took off the durable queue (under `token` or before) are answered or wait again. */
  reclaimQueued?(workstreamId: string, token: number): Promise<void>;
  /** Rows of sends this host queued durably changed. */
  queuedChanged?(ids: readonly number[]): void;
  /** Turns of these tenants ended on another host. */
  tenantsFreed?(tenantIds: readonly string[]): void;
  /** Another host's turn ended waiting for an approval: its timeout is kept here too (A4). */
  approvalWaiting?(workstreamId: string, nonce: string, expiresAt: number): void;
  /** Another host ended a wait it told of: its timeout goes here too. */
  approvalEnded?(workstreamId: string, nonce: string): void;
}

export interface ClusterStats {
  readonly hostId: string;
  readonly routedOut: number;
  readonly routedIn: number;
  /** Routed calls that ran here because the holder's lease expired unanswered. */
  readonly routedFallbacks: number;
  readonly failovers: number;
  /** Rows (`message` events) relayed from other hosts into this host's rings. */
  readonly followedRows: number;
  /** Events relayed from other hosts into this host's rings, and gaps the relay reported. */
  readonly relayedEvents: number;
  readonly relayGaps: number;
}

/** The host id of a lease holder (`<hostId>:<uuid>`). */
export const hostOf = (holder: string): string => holder.slice(0, Math.max(0, holder.lastIndexOf(':')));

export class Cluster {
  private readonly waiting = new Map<string, { resolve: (m: Reply) => void }>();
  /** Work that must finish before the store closes: routed calls being served, the sweep. */
  private readonly busy = new Set<Promise<unknown>>();
  private closing = false;
  /** Expired leases looked at already (workstream → token@expiry): each expiry is looked at once here. */
  private readonly seen = new Map<string, string>();
  private unlisten: (() => Promise<void>)[] = [];
  private stopSweep: CancelTimer | undefined;
  private sweeping = false;
  private stopped = false;
  private readonly counts = {
    routedOut: 0,
    routedIn: 0,
    routedFallbacks: 0,
    failovers: 0,
    followedRows: 0,
    relayedEvents: 0,
    relayGaps: 0,
  };
  /** Where the events authored here go, and other hosts' come from (relay.ts). */
  readonly relay: EventRelay;
  /** A log relay's replays in flight, per workstream. */
  private readonly following = new Map<string, Promise<void>>();
  /** Events authored here this tick, per workstream: handed to the relay together. */
  private authoredNow = new Map<string, TurnwardenEvent[]>();
  private handOverScheduled = false;
  private readonly freedTenants = new Set<string>();
  private freedScheduled = false;
  /** How many unanswered, unrenewed periods a routed call waits before it fails with TIMEOUT. */
  readonly maxRounds = 4;

  constructor(
    private readonly host: ClusterHost,
    private readonly channel: ClusterChannel,
    relay?: EventRelay,
  ) {
    this.relay = relay ?? new ChannelRelay(channel, host.logger);
  }

  async start(): Promise<void> {
    this.unlisten.push(await this.channel.listen(CONTROL_CHANNEL, (p) => this.onControl(p)));
    const { relay } = this;
    await relay.start(this.host.holder, {
      events: (batch) => this.onRelayed(batch),
      gap: (ws) => this.onGap(ws),
    });
    this.unlisten.push(() => {
      this.handOver();
      return relay.close();
    });
    const follows = !relay.broadcast;
    this.host.events.relayTo({
      authored: (ws, event) => this.authored(ws, event),
      opened: (ws, after) => {
        if (follows) void this.follow(ws, after);
      },
      dropped: (ws) => {
        if (follows) relay.unfollow(ws);
      },
    });
    this.stopSweep = this.host.timers.every(this.host.lease.renewMs, () => {
      void this.track(this.sweep());
    });
    this.host.logger.info({ hostId: this.host.hostId, holder: this.host.holder }, 'cluster host joined');
  }

  /**
   * Shutdown begins: no more takeovers, routed calls are answered SHUTTING_DOWN; replies to this
   * host's own routed calls are still listened to until `stop`.
   */
  beginShutdown(): void {
    this.closing = true;
    this.stopSweep?.();
    this.stopSweep = undefined;
  }

  /** After the turns ended: waits for the sweep and routed calls in flight, then stops listening. */
  async stop(): Promise<void> {
    this.beginShutdown();
    await Promise.allSettled([...this.busy]);
    this.stopped = true;
    for (const un of this.unlisten.splice(0)) await un().catch(() => undefined);
    for (const [id, w] of this.waiting) {
      w.resolve({ k: 'rep', id, to: this.host.holder, ok: false, error: toWire(shuttingDown()) });
    }
    this.waiting.clear();
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.busy.add(p);
    const done = () => this.busy.delete(p);
    p.then(done, done);
    return p;
  }

  /** What the cluster holds now — replies awaited, calls and sweeps in flight (for leak checks). */
  held(): { readonly waiting: number; readonly busy: number } {
    return { waiting: this.waiting.size, busy: this.busy.size };
  }

  stats(): ClusterStats {
    return { hostId: this.host.hostId, ...this.counts };
  }

  /** A lease that makes a call on this workstream belong to another host, if any. */
  async foreignLease(workstreamId: string): Promise<Lease | undefined> {
    const lease = await this.host.store.getLease(workstreamId);
    if (lease === undefined || lease.released || this.mine(lease.holder)) return undefined;
    return lease;
  }

  /**
   * Sends the call to the host holding the workstream's lease when it is not this one. Resolves
   * `{ ran: false }` when this host should run it (no other holder; or the holder's lease was
   * released, lapsed or is now this host's, unanswered), or the holder's answer; rejects with the
   * holder's error. The request names the lease token it was routed by: a holder that no longer
   * holds that lease answers `stale`, and the call is routed again by the lease as it is then.
   */
  async route(workstreamId: string, op: RoutedOp): Promise<{ ran: false } | { ran: true; result: unknown }> {
    if (this.host.runsHere(workstreamId)) return { ran: false };
    let lease = await this.foreignLease(workstreamId);
    let hops = 0;
    while (lease !== undefined) {
      if (++hops > this.maxRounds) {
        throw errors.timeout(
          `the ${op.op} of ${workstreamId} found its lease moving between hosts ${this.maxRounds} times`,
          { workstreamId },
        );
      }
      if (this.closing) throw shuttingDown();
      const id = randomUUID();
      const reply = this.await(id);
      this.counts.routedOut++;
      this.host.logger.info(
        { workstreamId, op: op.op, to: lease.holder, token: lease.token },
        'call routed to the host holding the lease',
      );
      let outcome: Awaited<ReturnType<Cluster['answerOrLapse']>>;
      try {
        await this.send({
          k: 'req',
          id,
          to: lease.holder,
          from: this.host.holder,
          ws: workstreamId,
          token: lease.token,
          ...op,
        });
        outcome = await this.answerOrLapse(reply, workstreamId, lease, op);
      } finally {
        reply.done();
      }
      if ('answer' in outcome) {
        const { answer } = outcome;
        if (answer.stale !== true) {
          if (answer.ok) return { ran: true, result: answer.result };
          throw fromWire(answer.error!);
        }
        lease = await this.foreignLease(workstreamId);
        continue;
      }
      if ('moved' in outcome) {
        lease = outcome.moved;
        continue;
      }
      this.counts.routedFallbacks++;
      this.host.logger.warn(
        { workstreamId, op: op.op, holder: lease.holder },
        'the lease holder did not answer and its lease lapsed or changed hands: running the call here',
      );
      return { ran: false };
    }
    return { ran: false };
  }

  /**
   * Waits for the holder's answer, looking at the lease every renewal period. The lease released
   * or now this host's: the holder is done with it — one more short wait for an answer on its
   * way, then `lapsed`. Taken by another holder: `moved` (the call follows it). Not renewed for a
   * whole TTL and period (and, in the first round, a soft close's waitMs): the holder is gone
   * (`lapsed`). Renewed without an answer for `maxRounds` such periods: TIMEOUT — no call waits
   * forever.
   */
  private async answerOrLapse(
    reply: ReturnType<Cluster['await']>,
    workstreamId: string,
    lease: Lease,
    op: RoutedOp,
  ): Promise<{ answer: Reply } | { moved: Lease } | { lapsed: true }> {
    const { ttlMs, renewMs } = this.host.lease;
    let seen = lease;
    for (let round = 0; round < this.maxRounds; round++) {
      // A soft close's holder answers within its waitMs: the first round waits for that on top
      // of a TTL and a period, the later ones do not (a routed close is bounded by waitMs plus
      // maxRounds TTL-and-period rounds, not maxRounds times waitMs).
      const budget = ttlMs + renewMs + (round === 0 && op.op === 'close' ? op.waitMs : 0);
      let waited = 0;
      while (waited < budget) {
        const slice = Math.min(renewMs, budget - waited);
        const answer = await reply.within(slice);
        if (answer !== undefined) return { answer };
        waited += slice;
        const now = await this.foreignLease(workstreamId);
        if (now === undefined || now.token !== lease.token) {
          // An answer may be on its way (the holder released the lease, then answers).
          const late = await reply.within(Math.min(renewMs, 1_000));
          if (late !== undefined) return { answer: late };
          return now === undefined ? { lapsed: true } : { moved: now };
        }
        if (this.closing) throw shuttingDown();
        seen = now;
      }
      // A whole TTL and period: renewed since (alive, busy) or not (gone)?
      if (seen.expiresAt <= lease.expiresAt) return { lapsed: true };
      lease = seen;
    }
    throw errors.timeout(
      `host ${hostOf(lease.holder)} holds the lease of ${workstreamId} and did not answer the ${op.op}`,
      { workstreamId, hostId: hostOf(lease.holder) },
    );
  }

  /**
   * Cluster mode, a reconnect after `after` (E1) or a handoff at it (E2) that this host's ring
   * does not reach: when nobody listens to the workstream here, its stream begins again at
   * `after` and the relay replays what it keeps after it (a log relay); when it is listened to,
   * the relay's events from `after` to the ring bridge the two (`Earlier`). The ring then
   * reaches `after`, or the listener is told `replay_truncated` — never a silent hole.
   */
  async catchUp(workstreamId: string, after: number): Promise<Earlier | undefined> {
    const { events } = this.host;
    if (this.relay.broadcast || events.covers(workstreamId, after)) return undefined;
    if (!this.host.runsHere(workstreamId) && events.restart(workstreamId, after)) {
      // `restart` told the relay to follow from `after` (`opened`): wait for its replay.
      await this.following.get(workstreamId);
      return undefined;
    }
    // Listened to here (or its turn runs here): the relay's events from `after` to the ring.
    const upTo = events.ringFrom(workstreamId);
    if (upTo === undefined || after >= upTo) return undefined;
    const earlier = await this.relay.read(workstreamId, after, upTo).catch((err: unknown) => {
      this.host.logger.warn({ err, workstreamId }, 'reading a workstream’s events on the relay failed');
      return undefined;
    });
    if (earlier === undefined || !earlier.every(validEvent)) return undefined;
    for (const e of earlier) events.saw(e.id);
    return { after, upTo, events: earlier };
  }

  /**
   * Before a lease is released: every event authored here is in the relay, ahead of the next
   * holder's. Bounded by a renewal period: a relay that does not answer delays no turn's end
   * longer (its followers are told of what it lost by its own gap).
   */
  async published(): Promise<void> {
    this.handOver();
    let cancel = () => {};
    const late = new Promise<boolean>((r) => {
      cancel = this.host.timers.after(this.host.lease.renewMs, () => r(true));
    });
    const timedOut = await Promise.race([this.relay.flush().then(() => false), late]);
    cancel();
    if (timedOut) this.host.logger.warn({}, 'the event relay did not take the events before the lease went');
  }

  /** A turn of the tenant ended here: other hosts' sends waiting on its limit claim again (coalesced per tick). */
  freed(tenantId: string): void {
    if (tenantId === '') return;
    this.freedTenants.add(tenantId);
    if (this.freedScheduled) return;
    this.freedScheduled = true;
    setImmediate(() => {
      this.freedScheduled = false;
      const tenants = [...this.freedTenants];
      this.freedTenants.clear();
      // Batches well under a notification's 8,000 bytes (tenant ids are at most 128 characters).
      let batch: string[] = [];
      let bytes = 0;
      const flush = () => {
        if (batch.length > 0) void this.send({ k: 'freed', from: this.host.holder, tenants: batch });
        batch = [];
        bytes = 0;
      };
      for (const t of tenants) {
        if (bytes + t.length + 3 > 6_000) flush();
        batch.push(t);
        bytes += t.length + 3;
      }
      flush();
    });
  }

  /** A turn ended here waiting for an approval: every other host keeps the wait's timeout too (A4). */
  approvalWaiting(workstreamId: string, nonce: string, expiresAt: number): void {
    void this.send({ k: 'wait', from: this.host.holder, ws: workstreamId, nonce, expiresAt });
  }

  /** A wait ended here (decided, cancelled, timed out): the other hosts drop its timeout. */
  approvalEnded(workstreamId: string, nonce: string): void {
    void this.send({ k: 'waited', from: this.host.holder, ws: workstreamId, nonce });
  }

  /** Tells the host whose holder is `origin` that rows of sends it queued changed (durable-sends.ts). */
  tellQueued(origin: string, ids: readonly number[]): void {
    for (let i = 0; i < ids.length; i += 500)
      void this.send({ k: 'sendq', to: origin, ids: ids.slice(i, i + 500) });
  }

  // ── internals ──────────────────────────────────────────────────────────────

  private mine(holder: string): boolean {
    return (
      holder === this.host.holder ||
      (this.host.predecessors !== undefined && holder.startsWith(this.host.predecessors))
    );
  }

  private await(id: string) {
    let resolveAnswer: (m: Reply) => void = () => {};
    this.waiting.set(id, { resolve: (m) => resolveAnswer(m) });
    let answer: Reply | undefined;
    const got = new Promise<void>((r) => {
      resolveAnswer = (m: Reply) => {
        answer = m;
        r();
      };
    });
    return {
      /** The answer if it came within `ms` (or before), else undefined. */
      within: async (ms: number) => {
        if (answer !== undefined) return answer;
        let cancel = () => {};
        const timeout = new Promise<void>((r) => {
          cancel = this.host.timers.after(ms, r);
        });
        await Promise.race([got, timeout]);
        cancel();
        return answer;
      },
      done: () => {
        this.waiting.delete(id);
      },
    };
  }

  private send(message: ControlMessage): Promise<void> {
    return this.channel.notify(CONTROL_CHANNEL, JSON.stringify(message)).catch((err: unknown) => {
      this.host.logger.warn(
        { err, kind: message.k, workstreamId: 'ws' in message ? message.ws : undefined },
        'control message not sent',
      );
    });
  }

  private onControl(payload: string): void {
    const m = parseControl(payload);
    if (m === undefined) {
      this.host.logger.warn({ payload: payload.slice(0, 200) }, 'malformed control message ignored');
      return;
    }
    if (this.stopped) return;
    switch (m.k) {
      case 'rep':
        if (m.to === this.host.holder) this.waiting.get(m.id)?.resolve(m);
        return;
      case 'req':
        if (m.to === this.host.holder) void this.track(this.serve(m));
        return;
      case 'sendq':
        if (m.to === this.host.holder) this.host.queuedChanged?.(m.ids);
        return;
      case 'freed':
        if (m.from !== this.host.holder) this.host.tenantsFreed?.(m.tenants);
        return;
      case 'wait':
        if (m.from !== this.host.holder) this.host.approvalWaiting?.(m.ws, m.nonce, m.expiresAt);
        return;
      case 'waited':
        if (m.from !== this.host.holder) this.host.approvalEnded?.(m.ws, m.nonce);
        return;
    }
  }

  /**
   * Runs a call another host routed here — only while this host still holds the lease it was
   * routed by (a request that waited, say through a pause, must not act on a later turn).
   */
  private async serve(m: Extract<ControlMessage, { k: 'req' }>): Promise<void> {
    this.counts.routedIn++;
    const { k: _k, id, to: _to, from, ws, token, ...op } = m;
    this.host.logger.info({ workstreamId: ws, op: op.op, from }, 'routed call received');
    let reply: Reply;
    try {
      if (this.closing) throw shuttingDown();
      const lease = await this.host.store.getLease(ws);
      if (
        lease === undefined ||
        lease.token !== token ||
        lease.holder !== this.host.holder ||
        lease.released
      ) {
        reply = { k: 'rep', id, to: from, ok: false, stale: true };
      } else {
        const result = await this.host.runLocally(ws, op as RoutedOp);
        reply = { k: 'rep', id, to: from, ok: true, result: result ?? null };
      }
    } catch (e) {
      reply = { k: 'rep', id, to: from, ok: false, error: toWire(e) };
    }
    await this.send(reply);
  }

  /** An event authored here: handed to the relay with the rest of this tick's. */
  private authored(workstreamId: string, event: TurnwardenEvent): void {
    let list = this.authoredNow.get(workstreamId);
    if (list === undefined) {
      list = [];
      this.authoredNow.set(workstreamId, list);
    }
    list.push(event);
    if (this.handOverScheduled) return;
    this.handOverScheduled = true;
    setImmediate(() => this.handOver());
  }

  private handOver(): void {
    this.handOverScheduled = false;
    if (this.authoredNow.size === 0) return;
    const batches = [...this.authoredNow].map(([workstreamId, events]) => ({ workstreamId, events }));
    this.authoredNow = new Map();
    this.relay.publish(batches);
  }

  /** Another host's events: into this host's ring, under their author's ids. */
  private onRelayed(batch: RelayedBatch): void {
    if (this.stopped || batch.from === this.host.holder) return;
    const { events } = this.host;
    for (const event of batch.events) {
      // A broker is a store any of its clients can write: what is not an event is dropped.
      if (!validEvent(event)) {
        this.host.logger.warn({ workstreamId: batch.workstreamId }, 'malformed relayed event ignored');
        this.onGap(batch.workstreamId);
        return;
      }
      this.counts.relayedEvents++;
      if (event.type === 'message') this.counts.followedRows++;
      events.relayed(batch.workstreamId, event as TurnwardenEvent);
    }
  }

  /** The relay may have lost events: listeners re-read (those of turns running here excepted). */
  private onGap(workstreamId: string | undefined): void {
    this.counts.relayGaps++;
    this.host.logger.warn({ workstreamId }, 'relayed events may have been lost; listeners re-read');
    const here = (ws: string) => this.host.runsHere(ws);
    if (workstreamId === undefined) this.host.events.gap(here);
    else this.host.events.gap((ws) => ws !== workstreamId || here(ws));
  }

  /** A log relay: the workstream's events from after `after`; its replay awaited by `catchUp`. */
  private follow(workstreamId: string, after: number): Promise<void> {
    const done = this.relay.follow(workstreamId, after).then(
      (complete) => {
        if (!complete) this.onGap(workstreamId);
      },
      (err: unknown) => {
        this.host.logger.warn({ err, workstreamId }, 'following a workstream on the relay failed');
        this.onGap(workstreamId);
      },
    );
    this.following.set(workstreamId, done);
    void done.finally(() => {
      if (this.following.get(workstreamId) === done) this.following.delete(workstreamId);
    });
    return done;
  }

  /** S7 across hosts: sessions whose holder's lease expired unreleased are repaired here. */
  private async sweep(): Promise<void> {
    if (this.sweeping || this.stopped || this.closing) return;
    this.sweeping = true;
    try {
      const expired = await this.host.store.expiredLeases();
      for (const lease of expired) {
        if (this.stopped || this.closing) return;
        if (lease.holder === this.host.holder || this.host.runsHere(lease.workstreamId)) continue;
        // Once per expiry: a lease renewed since it was looked at (its holder was only late) and
        // expired again is looked at again.
        const expiry = `${lease.token}@${lease.expiresAt}`;
        if (this.seen.get(lease.workstreamId) === expiry) continue;
        this.seen.set(lease.workstreamId, expiry);
        const where = { workstreamId: lease.workstreamId, deadHolder: lease.holder, token: lease.token };
        try {
          if (await this.host.repairIfLeft(lease.workstreamId)) {
            this.counts.failovers++;
            this.host.logger.warn(
              where,
              'took over a workstream whose host let its lease expire mid-turn; repaired',
            );
          } else {
            this.host.logger.info(
              where,
              'expired lease of another host: its session holds nothing to repair',
            );
          }
          // Sends it took off the durable queue: answered if their turn began, else waiting again.
          await this.host.reclaimQueued?.(lease.workstreamId, lease.token);
        } catch (err) {
          // Another host won the lease, or the workstream is gone: nothing for this one to do.
          if (
            isTurnwardenError(err, ErrorCode.LEASED_ELSEWHERE) ||
            isTurnwardenError(err, ErrorCode.WORKSTREAM_NOT_FOUND) ||
            isTurnwardenError(err, ErrorCode.WORKSTREAM_CLOSED)
          ) {
            this.host.logger.info(
              { ...where, code: (err as { code: string }).code },
              'expired lease of another host: left alone',
            );
          } else {
            this.seen.delete(lease.workstreamId);
            this.host.logger.warn(
              { err, workstreamId: lease.workstreamId },
              'failover repair failed; will retry',
            );
          }
        }
      }
      if (this.seen.size > 10_000) this.seen.clear();
    } catch (err) {
      this.host.logger.warn({ err }, 'failover sweep failed; will retry');
    } finally {
      this.sweeping = false;
    }
  }
}
