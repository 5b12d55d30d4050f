/**
 * `turnwarden demo --server URL --token T`: the demo's workload against a running
 * `turnwarden serve`, over HTTP only. Each workstream is created with `POST /v1/workstreams`, its
 * turns are sent with `wait` (a force-cancel turn is cancelled over HTTP once its event stream
 * shows the sleep started), and afterwards every history is read back with `GET …/history` and
 * audited: no dangling call (S1), synthesized results `unknown`/`none` (S2), one user row per
 * accepted send. Store faults cannot be injected into a remote server's store: those kinds are
 * left out. The server's own watchdog decides when stalled turns end: serve it with a short
 * `watchdog.timeoutMs` for a quick run.
 */
import type { HistoryRow } from '@turnwarden/protocol';
import type { DemoArgs } from '../args.js';
import { sseFrames } from '../sse.js';
import {
  auditHistory,
  classifyTurn,
  countVerdicts,
  durableSynthesizedOf,
  type IntegrityCheck,
  integrityChecks,
  mergeAudits,
  userRowsOf,
} from './integrity.js';
import type { RecordKind, TurnRecord } from './types.js';
import { EXPECTED, planWorkload, type WorkstreamPlan } from './workload.js';

export interface RemoteReport {
  readonly ok: boolean;
  readonly server: string;
  readonly records: readonly TurnRecord[];
  readonly checks: readonly IntegrityCheck[];
  readonly elapsedMs: number;
}

/** One `turnwarden serve` over HTTP, with a bearer token. */
export class Remote {
  constructor(
    readonly url: string,
    private readonly token: string,
  ) {}

  // biome-ignore lint/suspicious/noExplicitAny: the API's JSON bodies, read field by field as the OpenAPI document describes them
  async call(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
    const res = await fetch(`${this.url}/v1${path}`, {
      method,
      headers: {
        authorization: `Bearer ${this.token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: text === '' ? undefined : JSON.parse(text) };
  }

  /** Cancels the workstream's turn once its event stream shows the `sleep` tool started. */
  cancelWhenSleeping(workstreamId: string): () => void {
    return this.whenToolStarts(workstreamId, 'sleep', async () => {
      await this.call('POST', `/workstreams/${workstreamId}/cancel`);
    });
  }

  /**
   * Runs `action` once the workstream's event stream shows the tool `name` started; resolves
   * `listening` once the stream is open (events from then on are seen). Returns the stop.
   */
  whenToolStarts(
    workstreamId: string,
    name: string,
    action: () => Promise<void>,
    listening?: () => void,
  ): () => void {
    const stop = new AbortController();
    void (async () => {
      try {
        const res = await fetch(`${this.url}/v1/workstreams/${workstreamId}/events`, {
          headers: { authorization: `Bearer ${this.token}`, accept: 'text/event-stream' },
          signal: stop.signal,
        });
        listening?.();
        for await (const frame of sseFrames(res.body as unknown as AsyncIterable<Uint8Array>)) {
          if (frame.event === 'tool_started' && frame.data.includes(`"name":"${name}"`)) {
            await action();
            break;
          }
        }
      } catch {
        // stopped
      } finally {
        listening?.();
      }
    })();
    return () => stop.abort();
  }
}

type Answer = Awaited<ReturnType<Remote['call']>>;

/**
 * A double-text turn over HTTP (M1–M4): once the turn's long tool has started — its event stream
 * says so — the user sends `followUp` with the variant's policy. `answer` resolves with the second
 * send's response (wait: true). Called before the first turn is sent: its events are all seen.
 */
async function doubleTextWhileRunning(
  remote: Remote,
  workstreamId: string,
  turn: { readonly variant: string; readonly followUp?: string },
): Promise<{ answer(): Promise<Answer> }> {
  let answered: Promise<Answer> | undefined;
  let resolveSent!: () => void;
  const sentSecond = new Promise<void>((r) => {
    resolveSent = r;
  });
  let listening!: () => void;
  const open = new Promise<void>((r) => {
    listening = r;
  });
  const stop = remote.whenToolStarts(
    workstreamId,
    'heartbeat',
    async () => {
      answered = remote.call('POST', `/workstreams/${workstreamId}/messages`, {
        content: turn.followUp,
        doubleTexting: turn.variant,
        wait: true,
      });
      resolveSent();
    },
    listening,
  );
  await open;
  return {
    answer: async () => {
      await Promise.race([sentSecond, new Promise((r) => setTimeout(r, 0))]);
      stop();
      if (answered === undefined) return { status: 0, body: undefined };
      return answered;
    },
  };
}

async function drive(remote: Remote, plan: WorkstreamPlan): Promise<TurnRecord[]> {
  const records: TurnRecord[] = [];
  const created = await remote.call('POST', '/workstreams', { workstreamId: plan.id });
  if (created.status !== 201)
    throw new Error(`creating ${plan.id}: HTTP ${created.status} ${JSON.stringify(created.body)}`);
  const turns = [
    ...plan.turns.map((t) => ({ ...t, expected: EXPECTED[t.kind] })),
    {
      index: plan.turns.length + 1,
      kind: 'idle-check' as RecordKind,
      variant: 'plain',
      content: plan.idleCheck,
      expected: 'completed' as const,
    },
  ];
  for (const turn of turns) {
    const stopCancel = turn.kind === 'cancel' ? remote.cancelWhenSleeping(plan.id) : undefined;
    const doubled =
      'followUp' in turn && turn.followUp !== undefined
        ? await doubleTextWhileRunning(remote, plan.id, turn)
        : undefined;
    const t0 = performance.now();
    const sent = await remote.call('POST', `/workstreams/${plan.id}/messages`, {
      content: turn.content,
      wait: true,
    });
    stopCancel?.();
    const second = doubled === undefined ? undefined : await doubled.answer();
    const base = {
      workstreamId: plan.id,
      index: turn.index,
      total: plan.turns.length,
      kind: turn.kind,
      variant: turn.variant,
      expected: turn.expected,
      tenant: 'remote',
      waitMs: 0,
      durationMs: Math.round(performance.now() - t0),
    };
    if (sent.status !== 200) {
      const errorCode: string = sent.body?.error?.code ?? `HTTP_${sent.status}`;
      const obs = { status: 'rejected' as const, workerTerminated: false, errorCode };
      records.push({
        ...base,
        ...obs,
        synthesized: 0,
        errorMessage: sent.body?.error?.message,
        verdict: classifyTurn(turn.expected, obs),
      });
      continue;
    }
    const r = sent.body;
    let doubleText: TurnRecord['doubleText'];
    if (second !== undefined) {
      const policy = turn.variant as NonNullable<TurnRecord['doubleText']>['policy'];
      const ran = second.status === 200;
      // A rollback removed the first turn's rows, if it was still running (or had just ended).
      const rows =
        policy === 'rollback'
          ? (((await remote.call('GET', `/workstreams/${plan.id}/history`)).body?.rows ?? []) as HistoryRow[])
          : [];
      const rolledBack = policy === 'rollback' && !rows.some((row) => row.generation === r.generation);
      doubleText = {
        policy,
        second: ran
          ? second.body.status
          : second.status === 409 && second.body?.error?.code === 'TURN_IN_PROGRESS'
            ? 'refused'
            : 'not_sent',
        rolledBack,
      };
    }
    const obs = {
      status: r.status,
      abortReason: r.abortReason,
      workerTerminated: r.workerTerminated,
      errorCode: r.error?.code,
      doubleText,
    };
    records.push({
      ...base,
      ...(doubleText === undefined ? {} : { doubleText }),
      generation: r.generation,
      status: r.status,
      ...(r.abortReason === undefined ? {} : { abortReason: r.abortReason }),
      workerTerminated: r.workerTerminated,
      synthesized: r.synthesized,
      ...(r.error === undefined ? {} : { errorCode: r.error.code, errorMessage: r.error.message }),
      verdict: classifyTurn(turn.expected, obs),
    });
  }
  return records;
}

export async function runRemoteDemo(
  args: DemoArgs & { readonly server: string; readonly token: string },
): Promise<RemoteReport> {
  const started = performance.now();
  const remote = new Remote(args.server.replace(/\/+$/, ''), args.token);
  const plan = planWorkload({
    workstreams: args.workstreams,
    turns: args.turns,
    seed: args.seed,
    timeoutMs: args.timeoutMs,
    storeFaults: false,
    // This driver does not decide approval waits (the in-process demo does).
    approvals: false,
    // Workstream ids of their own, so runs against one server do not collide.
    idPrefix: `demo-${Date.now().toString(36)}-`,
  });
  const perWorkstream = await Promise.all(plan.workstreams.map((ws) => drive(remote, ws)));
  const records = perWorkstream.flat();
  const audits = [];
  let historyMismatches = 0;
  let synthesized = 0;
  for (const [i, ws] of plan.workstreams.entries()) {
    const history = await remote.call('GET', `/workstreams/${ws.id}/history`);
    const rows = (history.body?.rows ?? []) as HistoryRow[];
    const audit = auditHistory(rows);
    audits.push(audit);
    const records = perWorkstream[i] ?? [];
    if (audit.userMessages !== records.reduce((n, r) => n + userRowsOf(r), 0)) historyMismatches++;
    synthesized += records.reduce((n, r) => n + durableSynthesizedOf(r), 0);
  }
  const checks = integrityChecks({
    verdicts: countVerdicts(records),
    audit: mergeAudits(audits),
    historyMismatches,
    synthesizedCounted: synthesized,
    faultsNotInjected: 0,
    capacityRefusals: records.filter((r) => r.errorCode === 'CAPACITY_EXHAUSTED').length,
  });
  return {
    ok: checks.every((c) => c.ok),
    server: remote.url,
    records,
    checks,
    elapsedMs: performance.now() - started,
  };
}

/** The remote run's summary, for a terminal. */
export function formatRemote(report: RemoteReport): string {
  const kinds = [...new Set(report.records.map((r) => r.kind))];
  const lines = [
    `turnwarden demo against ${report.server}: ${report.records.length} turns in ${(report.elapsedMs / 1000).toFixed(1)} s`,
    '',
  ];
  for (const kind of kinds) {
    const rs = report.records.filter((r) => r.kind === kind);
    const ok = rs.filter((r) => r.verdict === 'ok').length;
    lines.push(
      `  ${kind.padEnd(12)} ${String(rs.length).padStart(3)} turns, ${ok} as expected (${rs[0]!.expected})`,
    );
  }
  lines.push('', '  integrity (histories read back over HTTP):');
  for (const c of report.checks)
    lines.push(
      `    ${c.ok ? '✓' : '✗'}  ${c.label.padEnd(66)} ${String(c.value).padStart(3)}  ${c.guarantee}`,
    );
  lines.push('', `  RESULT: ${report.ok ? 'OK — every check passed' : 'FAILED'}`, '');
  return lines.join('\n');
}
