/**
 * `turnwarden demo --hosts 3 --postgres [URL]`: the demo's workload across several
 * `turnwarden serve` processes sharing one PostgreSQL database (a throwaway cluster unless a URL
 * is given; then a fresh schema in it). Each workstream has a home host; mid-run one host is
 * killed (SIGKILL) while it runs turns and another is paused (SIGSTOP) past its lease and then
 * resumed. A send refused with LEASED_ELSEWHERE (the turn's lease is still the dead or paused
 * host's) is retried on a live host until the lease expires and the workstream is taken over.
 *
 * The integrity check re-reads the database afterwards: no dangling tool call (S1, S2, S7), no
 * row written by a superseded lease holder (P6: fencing tokens never decrease along a history),
 * and every planned turn accounted for — completed as its kind must, or lost with its host,
 * with the durable user rows between the sends confirmed and the sends left unknown.
 *
 * Each workstream is also followed for the whole run by an SSE client (watcher.ts) that
 * reconnects by `Last-Event-ID` whenever its connection breaks — through the balancer, or to the
 * next live host: no event may come twice or out of order, and every row must reach it — by its
 * event, or by the history re-read it did when told to (`history_resync`, `replay_truncated`;
 * E1 across hosts). With `--redis` the hosts relay their events
 * through a throwaway Redis server instead of PostgreSQL's LISTEN/NOTIFY.
 */
import { type HistoryRow, openToolCalls, workstreamKey } from '@turnwarden/protocol';
import { type RedisServer, redisSkipReason, startRedis } from '@turnwarden/relay-redis/testing';
import { openPostgresStore, type PostgresStore } from '@turnwarden/store';
import { type Postgres, startPostgres } from '@turnwarden/store/testing';
import type { DemoArgs } from '../args.js';
import { type Balancer, startBalancer } from '../cluster/balancer.js';
import { HostCluster } from '../cluster/hosts.js';
import { auditHistory, classifyTurn, type IntegrityCheck, mergeAudits } from './integrity.js';
import { Remote } from './remote.js';
import type { RecordKind } from './types.js';
import { type WatchCounts, Watcher } from './watcher.js';
import { EXPECTED, type Expectation, planWorkload, type WorkstreamPlan } from './workload.js';

export interface HostsArgs extends DemoArgs {
  readonly hosts: number;
  /** A PostgreSQL URL, or undefined for a throwaway cluster. */
  readonly postgres: string | undefined;
}

/** How a planned turn ended, from the client's side. */
type HostTurnOutcome =
  /** Ended as its kind must. */
  | 'ok'
  /** Its host died or lost the lease while it ran: it may or may not have been accepted. */
  | 'lost_with_host'
  /** Ended otherwise: a failed check. */
  | 'wrong';

interface HostTurn {
  readonly workstreamId: string;
  readonly index: number;
  readonly kind: RecordKind;
  readonly expected: Expectation;
  /** The host called: its id, or `balancer`. */
  readonly host: string;
  /** The host that ran the turn, as its result says (a queued send may run on another). */
  readonly ranOn?: string;
  readonly outcome: HostTurnOutcome;
  /** The send was accepted for sure (an answer came back), or may have been (the host went away). */
  readonly accepted: 'yes' | 'unknown' | 'no';
  readonly status?: string;
  readonly abortReason?: string;
  readonly errorCode?: string;
  /** Sends refused with LEASED_ELSEWHERE before this one was taken. */
  readonly leasedElsewhere: number;
  readonly durationMs: number;
}

interface ChaosEvent {
  readonly atMs: number;
  readonly host: string;
  readonly what: 'killed' | 'paused' | 'resumed';
  readonly turnsInFlight: number;
}

export interface HostsReport {
  readonly ok: boolean;
  readonly hosts: readonly string[];
  /** With `--balancer`: the load balancer every call went through. */
  readonly balancer?: string;
  /** The event relay between the hosts. */
  readonly relay: string;
  /** The SSE clients that followed the workstreams, summed (watcher.ts). */
  readonly sse: WatchCounts & {
    readonly watchers: number;
    /** Rows an SSE client has neither by their event nor by a re-read it was told to do (a failed check names them). */
    readonly missed: readonly {
      readonly workstreamId: string;
      readonly seq: number;
      readonly commitKey: string;
    }[];
  };
  readonly database: string;
  readonly turns: readonly HostTurn[];
  readonly chaos: readonly ChaosEvent[];
  readonly checks: readonly IntegrityCheck[];
  /** Workstreams the surviving hosts took over from a dead or paused one (their logs). */
  readonly failovers: number;
  /** Writes the paused host attempted for turns it had lost, refused by the fencing token (its logs). */
  readonly fencedWrites: number;
  readonly elapsedMs: number;
}

const TOKEN = `twdemo_${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
/** The tenant the hosts' token serves: the store keys its workstreams by it (T2). */
const TENANT = 'acme';
const LEASE = { ttlMs: 1_500, renewMs: 400 };
const BACKOFF_MS = 150;

class Chaos {
  readonly events: ChaosEvent[] = [];
  readonly inFlight: number[];
  private done = 0;
  readonly started = performance.now();
  private killed = false;
  private paused = false;
  resumed: Promise<void> = Promise.resolve();

  /** Behind a balancer the client cannot tell which host runs a turn: the hosts' own metrics do. */
  private readonly active: number[];
  private stopProbe: (() => void) | undefined;

  constructor(
    private readonly cluster: HostCluster,
    private readonly total: number,
    readonly balanced = false,
  ) {
    this.inFlight = cluster.hosts.map(() => 0);
    this.active = cluster.hosts.map(() => 0);
  }

  /** Turns running on host `i`: as the client counts them, or (balanced) as the host reports them. */
  busy(i: number): number {
    return this.balanced ? this.active[i]! : this.inFlight[i]!;
  }

  /** Balanced: every 25 ms, each live host's running turns (`turnwarden_active_turns`), then `maybe`. */
  startProbe(): void {
    if (!this.balanced) return;
    let probing = false;
    const timer = setInterval(() => {
      if (probing) return;
      probing = true;
      void Promise.all(
        this.cluster.hosts.map(async (h, i) => {
          if (h.state !== 'running') return;
          const text = await fetch(`${h.url}/metrics`, { signal: AbortSignal.timeout(300) })
            .then((r) => r.text())
            .catch(() => undefined);
          const m = text === undefined ? null : /^turnwarden_active_turns (\d+)$/m.exec(text);
          if (m !== null) this.active[i] = Number(m[1]);
        }),
      ).finally(() => {
        probing = false;
        this.maybe();
      });
    }, 25);
    this.stopProbe = () => clearInterval(timer);
  }

  stop(): void {
    this.stopProbe?.();
  }

  live(i: number): boolean {
    return this.cluster.host(i).state === 'running';
  }

  /**
   * Whether the host with id `host` was killed, or paused, at some moment between `from` and `to`
   * (ms into the run); with no host known (behind a balancer, or a send whose turn was lost with
   * a host that took it from the queue), whether any host was.
   */
  struck(host: string | undefined, from: number, to: number): boolean {
    if (host === undefined) return this.cluster.hosts.some((h) => this.struckHost(h.id, from, to));
    return this.struckHost(host, from, to);
  }

  private struckHost(id: string, from: number, to: number): boolean {
    const mine = this.events.filter((e) => e.host === id);
    const killed = mine.find((e) => e.what === 'killed');
    if (killed !== undefined && killed.atMs <= to) return true;
    const paused = mine.find((e) => e.what === 'paused');
    if (paused === undefined) return false;
    const resumed = mine.find((e) => e.what === 'resumed')?.atMs ?? Number.POSITIVE_INFINITY;
    return paused.atMs <= to && resumed >= from;
  }

  /** A turn finished: past a quarter of the run the first host dies, past half the second pauses. */
  turnDone(): void {
    this.done++;
    this.maybe();
  }

  maybe(): void {
    const hosts = this.cluster.hosts.length;
    if (!this.killed && this.done >= this.total / 4 && this.busy(0) > 0) {
      this.killed = true;
      this.events.push(this.event(0, 'killed'));
      void this.cluster.kill(0);
    }
    if (hosts >= 3 && this.killed && !this.paused && this.done >= this.total / 2 && this.busy(1) > 0) {
      this.paused = true;
      this.cluster.pause(1);
      this.events.push(this.event(1, 'paused'));
      this.resumed = new Promise<void>((resolve) =>
        setTimeout(
          () => {
            this.cluster.resume(1);
            this.events.push(this.event(1, 'resumed'));
            resolve();
          },
          2 * LEASE.ttlMs + LEASE.renewMs,
        ),
      );
    }
  }

  private event(i: number, what: ChaosEvent['what']): ChaosEvent {
    return {
      atMs: Math.round(performance.now() - this.started),
      host: this.cluster.host(i).id,
      what,
      turnsInFlight: this.busy(i),
    };
  }
}

async function driveWorkstream(
  cluster: HostCluster,
  chaos: Chaos,
  remotes: readonly Remote[],
  plan: WorkstreamPlan,
  home: number,
  /** The workstream exists: its SSE client may start. */
  created: () => void = () => {},
): Promise<HostTurn[]> {
  const turns: HostTurn[] = [];
  const pick = () => {
    for (let k = 0; k < remotes.length; k++) {
      const i = (home + k) % remotes.length;
      if (chaos.live(i)) return i;
    }
    return home;
  };
  let exists = false;
  while (!exists) {
    const i = pick();
    const res = await remotes[i]!.call('POST', '/workstreams', { workstreamId: plan.id }).catch(
      () => undefined,
    );
    if (res?.status === 201 || res?.status === 409) exists = true;
    else await new Promise((r) => setTimeout(r, BACKOFF_MS));
  }
  created();
  for (const turn of plan.turns) {
    const expected = EXPECTED[turn.kind];
    const t0 = performance.now();
    const since = () => t0 - chaos.started;
    let leasedElsewhere = 0;
    let retried = 0;
    for (;;) {
      if (retried > 200) {
        turns.push({
          workstreamId: plan.id,
          index: turn.index,
          kind: turn.kind,
          expected,
          host: '-',
          outcome: 'wrong',
          accepted: 'no',
          status: 'never admitted',
          leasedElsewhere,
          durationMs: Math.round(performance.now() - t0),
        });
        break;
      }
      const i = pick();
      const remote = remotes[i]!;
      const stopCancel = turn.kind === 'cancel' ? remote.cancelWhenSleeping(plan.id) : undefined;
      chaos.inFlight[i]!++;
      chaos.maybe();
      let refusedConnection = false;
      const sent = await remote
        .call('POST', `/workstreams/${plan.id}/messages`, { content: turn.content, wait: true })
        .catch((e: unknown) => {
          refusedConnection = (e as { cause?: { code?: string } }).cause?.code === 'ECONNREFUSED';
          return undefined;
        });
      chaos.inFlight[i]!--;
      stopCancel?.();
      const base = {
        workstreamId: plan.id,
        index: turn.index,
        kind: turn.kind,
        expected,
        host: chaos.balanced ? 'balancer' : cluster.host(i).id,
        leasedElsewhere,
        durationMs: Math.round(performance.now() - t0),
      };
      // Excused only when the host it ran on was killed or paused while it ran: the one called
      // (a broken connection), or the one the result names (a send queued durably runs on
      // whichever host holds the workstream next).
      const called = chaos.balanced ? undefined : cluster.host(i).id;
      const struck = (host: string | undefined) =>
        chaos.struck(host, since(), performance.now() - chaos.started);
      if (sent === undefined && refusedConnection) {
        // The host is gone and never saw the send: another one takes it.
        retried++;
        await new Promise((r) => setTimeout(r, BACKOFF_MS));
        continue;
      }
      if (sent === undefined || (chaos.balanced && (sent.status === 502 || sent.status === 504))) {
        // The connection broke — behind a balancer, its 502/504 — the host died with the turn
        // (its send may have been accepted).
        turns.push({ ...base, outcome: struck(called) ? 'lost_with_host' : 'wrong', accepted: 'unknown' });
        break;
      }
      const code: string | undefined = sent.body?.error?.code;
      if (sent.status === 409 && code === 'LEASED_ELSEWHERE') {
        // Nothing was written: the lease is still another host's (a dead one's until it expires).
        leasedElsewhere++;
        retried++;
        await new Promise((r) => setTimeout(r, BACKOFF_MS));
        continue;
      }
      // Nothing written either: a host shutting down, debt being repaired, or a claim whose lease
      // was taken over while its host was paused (FENCED before its user row was durable).
      if (
        sent.status === 503 ||
        (sent.status === 409 && (code === 'TOOL_CLEANUP_PENDING' || code === 'FENCED'))
      ) {
        retried++;
        await new Promise((r) => setTimeout(r, BACKOFF_MS));
        continue;
      }
      if (sent.status !== 200) {
        turns.push({
          ...base,
          outcome: 'wrong',
          accepted: 'yes',
          status: `HTTP ${sent.status}`,
          ...(code === undefined ? {} : { errorCode: code }),
        });
        break;
      }
      const r = sent.body;
      // A pause freezes the turn: on resume its lease is gone and its watchdog sees the stall.
      const lost = r.status === 'interrupted' || r.error?.code === 'FENCED';
      const verdict = classifyTurn(expected, {
        status: r.status,
        abortReason: r.abortReason,
        workerTerminated: r.workerTerminated,
        errorCode: r.error?.code,
      });
      turns.push({
        ...base,
        ...(typeof r.host === 'string' ? { ranOn: r.host } : {}),
        // A cancel turn's cancel is the client's own call, on an SSE stream of the host it called
        // (any host, behind a balancer): that host struck, the cancel may never have been sent.
        outcome:
          verdict === 'ok'
            ? 'ok'
            : lost && (struck(r.host) || (turn.kind === 'cancel' && struck(called)))
              ? 'lost_with_host'
              : 'wrong',
        accepted: 'yes',
        status: r.status,
        ...(r.abortReason === undefined ? {} : { abortReason: r.abortReason }),
        ...(r.error?.code === undefined ? {} : { errorCode: r.error.code }),
      });
      break;
    }
    chaos.turnDone();
  }
  return turns;
}

/** Rows written after a row of a newer lease: what a superseded holder's late write would leave (P6). */
export function supersededRows(rows: readonly HistoryRow[]): number {
  let newest = 0;
  let late = 0;
  for (const r of rows) {
    if (r.fencingToken === undefined) continue;
    if (r.fencingToken < newest) late++;
    newest = Math.max(newest, r.fencingToken);
  }
  return late;
}

export async function runHostsDemo(args: HostsArgs): Promise<HostsReport> {
  const started = performance.now();
  let pg: Postgres | undefined;
  let url = args.postgres;
  if (url === undefined) {
    const started = await startPostgres();
    if ('skip' in started)
      throw new Error(`--postgres without a URL needs a local PostgreSQL: ${started.skip}`);
    pg = started;
    url = started.url;
  }
  const schema = `tw_demo_${Date.now().toString(36)}`;
  let store: PostgresStore | undefined;
  let cluster: HostCluster | undefined;
  let balancer: Balancer | undefined;
  let chaos: Chaos | undefined;
  let redis: RedisServer | undefined;
  const watchers: Watcher[] = [];
  try {
    if (args.redis) {
      const why = redisSkipReason();
      if (why !== undefined) throw new Error(`--redis needs a local Redis server: ${why}`);
      redis = await startRedis();
    }
    store = await openPostgresStore({ connectionString: url, schema });
    cluster = await HostCluster.start({
      postgres: url,
      schema,
      hosts: args.hosts,
      token: TOKEN,
      tenantId: TENANT,
      ...(redis === undefined ? {} : { redis: redis.url }),
      runtime: {
        lease: LEASE,
        watchdog: { timeoutMs: args.timeoutMs, pollMs: args.pollMs, graceMs: args.graceMs },
        pool: { maxWorkers: args.maxWorkers, warmWorkers: args.warmWorkers },
      },
    });
    const plan = planWorkload({
      workstreams: args.workstreams,
      turns: args.turns,
      seed: args.seed,
      timeoutMs: args.timeoutMs,
      storeFaults: false,
      // This driver does not decide approval waits (the in-process demo does).
      approvals: false,
      // Nor does it double-text (the in-process demo does, M1–M4).
      doubleTexts: false,
      idPrefix: '',
    });
    const total = plan.workstreams.reduce((n, ws) => n + ws.turns.length, 0);
    const c = cluster;
    if (args.balancer) balancer = await startBalancer(c.hosts.map((h) => ({ id: h.id, url: h.url })));
    const ch = new Chaos(cluster, total, balancer !== undefined);
    chaos = ch;
    ch.startProbe();
    // Behind the balancer every call goes to it, whichever host the workstream would call home.
    const via = balancer;
    const remotes = c.hosts.map((h) => new Remote(via === undefined ? h.url : via.url, TOKEN));
    const watch = (id: string, home: number) => () => {
      // Through the balancer, or its home host first, then the next ones (a dead host refuses).
      const urls =
        via === undefined ? c.hosts.map((_, j) => c.host((home + j) % c.hosts.length).url) : [via.url];
      const w = new Watcher(urls, TOKEN, id);
      watchers.push(w);
      w.start();
    };
    const perWorkstream = await Promise.all(
      plan.workstreams.map((ws, k) =>
        driveWorkstream(c, ch, remotes, ws, k % c.hosts.length, watch(ws.id, k % c.hosts.length)),
      ),
    );
    await ch.resumed;
    ch.stop();
    const turns = perWorkstream.flat();
    // Every lease the dead host held has expired and been taken over before the database is read:
    // wait for the survivors' sweeps to repair what it left (bounded).
    const deadline = Date.now() + 4 * LEASE.ttlMs + 5_000;
    let histories: HistoryRow[][] = [];
    for (;;) {
      histories = await Promise.all(
        plan.workstreams.map((ws) => store!.readHistory(workstreamKey(TENANT, ws.id))),
      );
      const open = histories.reduce((n, rows) => n + openToolCalls(rows).length, 0);
      if (open === 0 || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    // Each SSE client has every row, by its event or by a re-read it was told to do (bounded: in flight only).
    const byId = new Map(plan.workstreams.map((ws, k) => [ws.id, histories[k] ?? []]));
    const watched = plan.workstreams.map((ws) => watcherOf(watchers, ws.id));
    await Promise.all(
      plan.workstreams.map((ws, k) => {
        const w = watched[k];
        const rows = byId.get(ws.id) ?? [];
        return w?.until(() => rows.every((r) => w.rows.has(r.commitKey)), 3_000);
      }),
    );
    for (const w of watchers) await w.stop();
    // E1 across hosts: a row up to the last one a client has, missed without its being told.
    const missed = plan.workstreams.flatMap((ws, k) => {
      const w = watched[k];
      if (w === undefined) return [];
      return (byId.get(ws.id) ?? [])
        .filter((r) => r.seq <= w.maxSeq && !w.rows.has(r.commitKey))
        .map((r) => ({ workstreamId: ws.id, seq: r.seq, commitKey: r.commitKey }));
    });
    const rowsMissed = missed.length;
    const sse = watchers.reduce(
      (sum, w) => {
        const x = w.stats;
        return {
          watchers: sum.watchers + 1,
          reconnects: sum.reconnects + x.reconnects,
          resumed: sum.resumed + x.resumed,
          truncated: sum.truncated + x.truncated,
          rereads: sum.rereads + x.rereads,
          outOfOrder: sum.outOfOrder + x.outOfOrder,
          events: sum.events + x.events,
        };
      },
      { watchers: 0, reconnects: 0, resumed: 0, truncated: 0, rereads: 0, outOfOrder: 0, events: 0 },
    );
    const audit = mergeAudits(histories.map((rows) => auditHistory(rows)));
    const superseded = histories.reduce((n, rows) => n + supersededRows(rows), 0);
    let mismatched = 0;
    for (const k of plan.workstreams.keys()) {
      const mine = perWorkstream[k] ?? [];
      const sure = mine.filter((t) => t.accepted === 'yes').length;
      const maybe = mine.filter((t) => t.accepted === 'unknown').length;
      const users = (histories[k] ?? []).filter((r) => r.message.role === 'user').length;
      if (users < sure || users > sure + maybe) mismatched++;
    }
    const failovers = c.hosts.reduce(
      (n, _h, i) =>
        n + c.logged(i, 'took over a workstream whose host let its lease expire mid-turn; repaired').length,
      0,
    );
    const fencedWrites =
      c.hosts[1] === undefined ? 0 : c.host(1).lines.filter((l) => l.includes('"FENCED"')).length;
    const zero = (id: string, label: string, guarantee: string, value: number): IntegrityCheck => ({
      id,
      label,
      guarantee,
      value,
      ok: value === 0,
    });
    const checks: IntegrityCheck[] = [
      zero('dangling_tool_calls', 'dangling tool calls in the database', 'S1 S7', audit.danglingToolCalls),
      zero(
        'bad_synthesized_effects',
        'synthesized results not marked unknown/none',
        'S2',
        audit.badSynthesizedEffects,
      ),
      zero('superseded_rows', 'rows written by a superseded lease holder', 'P6', superseded),
      zero('late_rows', 'rows journaled after a turn was recovered', 'L3', audit.lateRows),
      zero(
        'chaos_not_exercised',
        `host failures not exercised (a kill mid-turn${c.hosts.length >= 3 ? ', a pause mid-turn' : ''})`,
        'S7 P6',
        (chaos.events.some((e) => e.what === 'killed' && e.turnsInFlight > 0) ? 0 : 1) +
          (c.hosts.length < 3 || chaos.events.some((e) => e.what === 'paused' && e.turnsInFlight > 0)
            ? 0
            : 1),
      ),
      zero(
        'wrong_outcomes',
        'turns that did not end as their kind must, their host alive throughout',
        'L C S',
        turns.filter((t) => t.outcome === 'wrong').length,
      ),
      zero('history_mismatches', 'workstreams whose user rows differ from the sends', 'P1 P2', mismatched),
      zero(
        'sse_out_of_order',
        'SSE events received twice or out of order across reconnections',
        'E1',
        sse.outOfOrder,
      ),
      zero(
        'sse_rows_missed',
        'rows an SSE client has neither by their event nor by a told re-read',
        'E1 E2',
        rowsMissed,
      ),
    ];
    return {
      ok: checks.every((x) => x.ok),
      hosts: c.hosts.map((h) => h.id),
      ...(balancer === undefined ? {} : { balancer: `HAProxy at ${balancer.url} (round robin)` }),
      relay: redis === undefined ? 'PostgreSQL LISTEN/NOTIFY' : `Redis Streams at ${redis.url}`,
      sse: { ...sse, missed },
      database:
        pg === undefined ? `${redact(url)} (schema ${schema})` : `throwaway PostgreSQL on port ${pg.port}`,
      turns,
      chaos: chaos.events,
      checks,
      failovers,
      fencedWrites,
      elapsedMs: performance.now() - started,
    };
  } finally {
    chaos?.stop();
    for (const w of watchers) await w.stop();
    await balancer?.stop();
    await cluster?.stop();
    await store?.close();
    pg?.stop();
    await redis?.stop();
  }
}

/** The SSE client of a workstream (started once it was created). */
function watcherOf(watchers: readonly Watcher[], workstreamId: string): Watcher | undefined {
  return watchers.find((w) => w.workstreamId === workstreamId);
}

function redact(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
}

export function formatHosts(report: HostsReport): string {
  const t = report.turns;
  const count = (o: HostTurnOutcome) => t.filter((x) => x.outcome === o).length;
  const lines = [
    `turnwarden demo across ${report.hosts.length} hosts (${report.hosts.join(', ')}) on ${report.database}: ${t.length} turns in ${(report.elapsedMs / 1000).toFixed(1)} s`,
    ...(report.balancer === undefined ? [] : [`every call through ${report.balancer}`]),
    '',
    ...report.chaos.map(
      (e) =>
        `  ${(e.atMs / 1000).toFixed(1).padStart(5)} s  ${e.host} ${e.what}${e.what === 'resumed' ? '' : ` with ${e.turnsInFlight} turn(s) in flight`}`,
    ),
    '',
    `  turns as their kind must          ${String(count('ok')).padStart(4)}`,
    `  turns lost with their host        ${String(count('lost_with_host')).padStart(4)}  (killed mid-turn, or the paused host's lease taken over)`,
    `  sends refused LEASED_ELSEWHERE    ${String(t.reduce((n, x) => n + x.leasedElsewhere, 0)).padStart(4)}  (a send meeting another host's turn waits in the database's queue instead)`,
    `  workstreams taken over            ${String(report.failovers).padStart(4)}  (expired leases repaired by a surviving host, S7)`,
    `  late writes refused (FENCED)      ${String(report.fencedWrites).padStart(4)}  (the paused host, after it resumed, P6)`,
    `  SSE reconnections                 ${String(report.sse.reconnects).padStart(4)}  (${report.sse.watchers} clients following a workstream each, events relayed by ${report.relay})`,
    `    resumed by Last-Event-ID        ${String(report.sse.resumed).padStart(4)}`,
    `    told replay_truncated           ${String(report.sse.truncated).padStart(4)}  (the host had no ring of it and the relay keeps nothing: the client re-reads)`,
    `  SSE clients' history re-reads     ${String(report.sse.rereads).padStart(4)}  (told history_resync or replay_truncated — a host that stopped mid-turn — they read GET …/history)`,
    '',
    '  integrity (the database re-read after the run):',
    ...report.checks.map(
      (c) => `    ${c.ok ? '✓' : '✗'}  ${c.label.padEnd(72)} ${String(c.value).padStart(3)}  ${c.guarantee}`,
    ),
    '',
    `  RESULT: ${report.ok ? 'OK — every check passed' : 'FAILED'}`,
    '',
  ];
  return lines.join('\n');
}
