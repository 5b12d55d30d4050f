/**
 * Prometheus metrics (prom-client): the runtime's counters read from `tw.stats()` at each scrape,
 * and the HTTP requests by route and status.
 */
import type { Turnwarden } from '@turnwarden/supervisor';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';

export class Metrics {
  private readonly registry = new Registry();
  private readonly requests: Histogram<'route' | 'method' | 'status'>;

  /** `openStreams`: the event streams this server holds open now (a gauge an operator can alert on). */
  constructor(tw: Turnwarden, openStreams: () => number) {
    const reg = this.registry;
    const counter = (name: string, help: string, read: () => number) =>
      new Counter({
        name,
        help,
        registers: [reg],
        collect() {
          this.reset();
          this.inc(read());
        },
      });
    const gauge = (name: string, help: string, read: () => number) =>
      new Gauge({
        name,
        help,
        registers: [reg],
        collect() {
          this.set(read());
        },
      });
    new Counter({
      name: 'turnwarden_turns_total',
      help: 'Turns ended, by status',
      labelNames: ['status'],
      registers: [reg],
      collect() {
        const s = tw.stats();
        this.reset();
        this.inc({ status: 'completed' }, s.turnsCompleted);
        this.inc({ status: 'interrupted' }, s.turnsInterrupted);
        this.inc({ status: 'failed' }, s.turnsFailed);
        this.inc({ status: 'awaiting_approval' }, s.turnsAwaitingApproval);
      },
    });
    new Counter({
      name: 'turnwarden_approvals_total',
      help: 'Waits for an approval decided, by how: approved, denied, timed_out (A1–A4)',
      labelNames: ['decision'],
      registers: [reg],
      collect() {
        const s = tw.stats();
        this.reset();
        this.inc({ decision: 'approved' }, s.approvalsApproved);
        this.inc({ decision: 'denied' }, s.approvalsDenied);
        this.inc({ decision: 'timed_out' }, s.approvalsTimedOut);
      },
    });
    counter(
      'turnwarden_watchdog_fired_total',
      'Stalls the watchdog detected',
      () => tw.stats().watchdogFired,
    );
    counter('turnwarden_aborts_committed_total', 'Aborts that committed', () => tw.stats().abortsCommitted);
    counter(
      'turnwarden_aborts_declined_total',
      'Aborts declined: progress landed in the window (L4)',
      () => tw.stats().abortsDeclined,
    );
    counter(
      'turnwarden_workers_terminated_total',
      'Session workers terminated (L3)',
      () => tw.stats().workersTerminated,
    );
    counter(
      'turnwarden_tool_results_synthesized_total',
      'Tool results synthesized by recovery (S2)',
      () => tw.stats().toolResultsSynthesized,
    );
    gauge('turnwarden_active_turns', 'Turns running now', () => tw.stats().activeTurns);
    gauge(
      'turnwarden_admission_waiting',
      'Sends waiting for a session worker (T4)',
      () => tw.stats().admission.waiting,
    );
    gauge('turnwarden_admission_active', 'Admission permits out', () => tw.stats().admission.active);
    counter(
      'turnwarden_admission_admitted_after_wait_total',
      'Sends admitted after waiting',
      () => tw.stats().admission.admittedAfterWait,
    );
    counter(
      'turnwarden_admission_refused_total',
      'Sends refused: the queue was full',
      () => tw.stats().admission.refusedFull,
    );
    gauge(
      'turnwarden_admission_wait_p99_ms',
      'How long sends that waited for a worker waited, p99 of the last 1,024',
      () => tw.stats().admission.waitMs.p99,
    );
    gauge(
      'turnwarden_journal_pending_rows',
      'Journal rows admitted and not yet durable (P3)',
      () => tw.stats().journal.pendingRows,
    );
    gauge(
      'turnwarden_journal_retrying',
      'Workstreams whose journal is retrying a transient store failure (P3)',
      () => tw.stats().journal.retrying,
    );
    gauge(
      'turnwarden_journal_conflicts',
      'Workstreams whose journal is in conflict (P1, P3)',
      () => tw.stats().journal.conflicts,
    );
    counter(
      'turnwarden_journal_refused_fenced_total',
      'Journal writes refused by the fence (L3, P6)',
      () => tw.stats().journalRefusedFenced,
    );
    gauge(
      'turnwarden_watchdog_poll_lateness_p99_ms',
      'How late the watchdog polled, p99 (L12)',
      () => tw.stats().watchdog.pollLateness.p99,
    );
    // Starvation is not a stall (docs/operations.md): the watchdog's verdicts on silent turns,
    // and how much the host makes the supervisor's own thread wait for a CPU (NaN off Linux).
    new Counter({
      name: 'turnwarden_watchdog_verdicts_total',
      help: 'Silent turns at their idle bound, by what their threads did: starved (abort deferred a window), wedged or stalled (aborted)',
      labelNames: ['verdict'],
      registers: [reg],
      collect() {
        const w = tw.stats().watchdog;
        this.reset();
        this.inc({ verdict: 'starved' }, w.starved);
        this.inc({ verdict: 'wedged' }, w.wedged);
        this.inc({ verdict: 'stalled' }, w.stalled);
      },
    });
    gauge(
      'turnwarden_main_thread_wait_ratio',
      "Share of the last ~10 s the supervisor's thread waited for a CPU: the host's saturation (NaN where unknown)",
      () => tw.stats().watchdog.saturation?.waitShare ?? Number.NaN,
    );
    gauge(
      'turnwarden_main_thread_busy_ratio',
      "Share of the last ~10 s the supervisor's thread ran on a CPU (NaN where unknown)",
      () => tw.stats().watchdog.saturation?.runShare ?? Number.NaN,
    );
    gauge('turnwarden_event_listeners', 'Event listeners attached', () => tw.stats().events.listeners);
    gauge('turnwarden_pool_workers', 'Session workers alive (warm, busy, starting)', () => {
      const p = tw.stats().pool;
      return p.warm + p.busy + p.starting;
    });
    gauge(
      'turnwarden_pool_claims_waiting',
      'Claims waiting for a session worker to become ready',
      () => tw.stats().pool.waiting,
    );
    counter(
      'turnwarden_pool_shrunk_total',
      'Warm workers stopped after a peak (idle past pool.idleTimeoutMs)',
      () => tw.stats().pool.shrunk,
    );
    // The shared model threads (models.placement shared; 0 with session placement).
    gauge('turnwarden_model_threads', 'Shared model threads serving', () => tw.stats().models?.threads ?? 0);
    gauge(
      'turnwarden_model_calls_running',
      'Model calls running on the shared model threads',
      () => tw.stats().models?.running ?? 0,
    );
    counter(
      'turnwarden_model_calls_failed_total',
      'Model calls on the shared threads that failed or were aborted',
      () => tw.stats().models?.failed ?? 0,
    );
    counter(
      'turnwarden_model_threads_replaced_total',
      'Model threads replaced: wedged (terminated) or exited',
      () => {
        const m = tw.stats().models;
        return m === undefined ? 0 : m.wedged + m.crashed;
      },
    );
    // Several hosts (docs/cluster.md): 0 on a host that is not in cluster mode.
    counter(
      'turnwarden_cluster_routed_out_total',
      'Calls sent to the host holding the lease',
      () => tw.stats().cluster?.routedOut ?? 0,
    );
    counter(
      'turnwarden_cluster_routed_in_total',
      'Calls other hosts sent here',
      () => tw.stats().cluster?.routedIn ?? 0,
    );
    counter(
      'turnwarden_cluster_routed_fallbacks_total',
      'Routed calls run here because the holder did not answer and its lease lapsed',
      () => tw.stats().cluster?.routedFallbacks ?? 0,
    );
    counter(
      'turnwarden_cluster_failovers_total',
      'Workstreams taken over from a host whose lease expired mid-turn (S7)',
      () => tw.stats().cluster?.failovers ?? 0,
    );
    counter(
      'turnwarden_cluster_relayed_events_total',
      'Events other hosts authored, relayed into this host’s streams',
      () => tw.stats().cluster?.relayedEvents ?? 0,
    );
    counter(
      'turnwarden_cluster_relay_gaps_total',
      'Times the relay may have lost events (their listeners were told to re-read)',
      () => tw.stats().cluster?.relayGaps ?? 0,
    );
    gauge(
      'turnwarden_http_event_streams',
      'Event streams (GET …/events) open on this server now',
      openStreams,
    );
    this.requests = new Histogram({
      name: 'turnwarden_http_request_duration_ms',
      help: 'HTTP requests by route, method and status',
      labelNames: ['route', 'method', 'status'],
      buckets: [1, 5, 10, 25, 50, 100, 250, 1000, 5000],
      registers: [reg],
    });
  }

  request(route: string, method: string, status: number, ms: number): void {
    this.requests.observe({ route, method, status: String(status) }, ms);
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  render(): Promise<string> {
    return this.registry.metrics();
  }
}
