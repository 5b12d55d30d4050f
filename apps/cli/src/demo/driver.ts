/**
 * Drives one workstream: its planned turns in order, then the idle check. Each send is made
 * once: over capacity it waits in the supervisor's fair admission queue (T4) — the driver has
 * no retry loop — and any refusal is recorded as the turn's outcome.
 */
import { isTurnwardenError } from '@turnwarden/protocol';
import type { DoubleTexting, TurnHandle, TurnResult, Turnwarden } from '@turnwarden/supervisor';
import { classifyTurn } from './integrity.js';
import type { RecordKind, TurnRecord } from './types.js';
import { EXPECTED, type Expectation, type WorkstreamPlan } from './workload.js';

export interface DemoObserver {
  /** The workstream's send was made: it may wait for a worker (T4). */
  waiting(workstreamId: string): void;
  /** A send was accepted. */
  turnStarted(workstreamId: string, index: number, kind: RecordKind): void;
  turnFinished(record: TurnRecord): void;
  /** The host force-cancels a workstream's turn (a cancel turn). */
  forceCancel?(workstreamId: string): void;
  /** A turn waits for an approval: the driver approves, denies or lets it time out (`variant`). */
  approval?(workstreamId: string, variant: string): void;
  /** The user sends again while the turn runs, with this double-texting policy (M1–M4). */
  doubleText?(workstreamId: string, policy: DoubleTexting): void;
}

export interface DriverContext {
  readonly tw: Turnwarden;
  readonly tenantId: string;
  readonly principal: string;
  /** Aborted when the demo is stopped early: no new sends; a send waiting for a worker is withdrawn. */
  readonly stop: AbortSignal;
  readonly observer: DemoObserver;
  /** The longest a send waits for a worker before it is refused (CAPACITY_EXHAUSTED). */
  readonly maxWaitMs: number;
}

interface Sent {
  readonly handle?: TurnHandle;
  readonly error?: unknown;
  /** From the call to the turn's start: the time it waited for a worker (T4). */
  readonly waitMs: number;
}

/** One send: it resolves once the turn has started — at once, or after waiting for a worker. */
async function send(ctx: DriverContext, workstreamId: string, content: string): Promise<Sent> {
  const started = performance.now();
  const waitMs = () => Math.round(performance.now() - started);
  if (ctx.stop.aborted) return { error: ctx.stop.reason, waitMs: 0 };
  ctx.observer.waiting(workstreamId);
  try {
    const handle = await ctx.tw.send({
      tenantId: ctx.tenantId,
      principal: ctx.principal,
      workstreamId,
      content,
      maxWaitMs: ctx.maxWaitMs,
      signal: ctx.stop,
    });
    return { handle, waitMs: waitMs() };
  } catch (error) {
    return { error, waitMs: waitMs() };
  }
}

interface TurnSpec {
  readonly workstreamId: string;
  readonly index: number;
  readonly total: number;
  readonly kind: RecordKind;
  readonly variant: string;
  readonly expected: Expectation;
  readonly content: string;
  /** A double-text turn's second message (its policy is the variant). */
  readonly followUp?: string;
}

/**
 * A cancel turn: the host force-cancels the workstream once its `sleep` tool started (C3).
 * Returns the unsubscribe function.
 */
function cancelWhenSleeping(ctx: DriverContext, workstreamId: string): Promise<() => void> {
  let fired = false;
  return ctx.tw.subscribe({
    tenantId: ctx.tenantId,
    principal: ctx.principal,
    workstreamId,
    listener: (e) => {
      if (fired || e.type !== 'tool_started' || e.data.name !== 'sleep') return;
      fired = true;
      ctx.observer.forceCancel?.(workstreamId);
      void ctx.tw
        .cancel({ tenantId: ctx.tenantId, principal: ctx.principal, workstreamId })
        .catch(() => false);
    },
  });
}

async function runTurn(ctx: DriverContext, spec: TurnSpec): Promise<TurnRecord> {
  const { content, followUp: _followUp, ...base } = spec;
  const unsubscribe = spec.kind === 'cancel' ? await cancelWhenSleeping(ctx, spec.workstreamId) : undefined;
  try {
    return await sendAndWait(ctx, spec, content, base);
  } finally {
    unsubscribe?.();
  }
}

async function sendAndWait(
  ctx: DriverContext,
  spec: TurnSpec,
  content: string,
  base: Omit<TurnSpec, 'content'>,
): Promise<TurnRecord> {
  const sent = await send(ctx, spec.workstreamId, content);
  const timing = { tenant: ctx.tenantId, waitMs: sent.waitMs };
  if (!sent.handle) {
    const errorCode = isTurnwardenError(sent.error) ? sent.error.code : 'ERROR';
    const errorMessage = sent.error instanceof Error ? sent.error.message : String(sent.error);
    const obs = { status: 'rejected' as const, workerTerminated: false, errorCode };
    return {
      ...base,
      ...timing,
      ...obs,
      errorMessage,
      synthesized: 0,
      durationMs: 0,
      verdict: classifyTurn(spec.expected, obs),
    };
  }
  ctx.observer.turnStarted(spec.workstreamId, spec.index, spec.kind);
  const t0 = performance.now();
  // A double-text turn: the second message goes while this one runs (its long tool).
  const doubled = spec.followUp === undefined ? undefined : doubleText(ctx, spec, spec.followUp, sent.handle);
  const first = await sent.handle.done; // never rejects
  const decided = first.approval === undefined ? undefined : await decide(ctx, spec, first.approval.token);
  const result = decided?.result ?? first;
  const approval = decided?.approval;
  const doubleTexted = doubled === undefined ? undefined : await doubled;
  return {
    ...base,
    ...timing,
    ...(approval === undefined ? {} : { approval }),
    ...(doubleTexted === undefined ? {} : { doubleText: doubleTexted }),
    generation: result.generation,
    status: result.status,
    ...(result.abortReason === undefined ? {} : { abortReason: result.abortReason }),
    workerTerminated: result.workerTerminated,
    synthesized: result.synthesized,
    durationMs: Math.round(performance.now() - t0),
    ...(result.error === undefined
      ? {}
      : { errorCode: result.error.code, errorMessage: result.error.message }),
    verdict: classifyTurn(spec.expected, {
      ...result,
      errorCode: result.error?.code,
      approval,
      ...(doubleTexted === undefined ? {} : { doubleText: doubleTexted }),
    }),
  };
}

/**
 * A double-text turn (M1–M4): while `first` runs, the user sends `content` with the variant's
 * policy. Reject is refused (TURN_IN_PROGRESS) unless the first turn had already ended; enqueue
 * runs after it; interrupt and rollback end it and run. Resolves once the second turn has ended;
 * whether a rollback removed the first turn's rows is read from the history.
 */
async function doubleText(
  ctx: DriverContext,
  spec: Omit<TurnSpec, 'content'>,
  content: string,
  first: TurnHandle,
): Promise<NonNullable<TurnRecord['doubleText']>> {
  const policy = spec.variant as DoubleTexting;
  const ref = { tenantId: ctx.tenantId, principal: ctx.principal, workstreamId: spec.workstreamId };
  ctx.observer.doubleText?.(spec.workstreamId, policy);
  let second: TurnHandle;
  try {
    second = await ctx.tw.send({
      ...ref,
      content,
      doubleTexting: policy,
      maxWaitMs: ctx.maxWaitMs,
      signal: ctx.stop,
    });
  } catch (e) {
    const refused = isTurnwardenError(e) && e.code === 'TURN_IN_PROGRESS';
    return { policy, second: refused ? 'refused' : 'not_sent', rolledBack: false };
  }
  const result = await second.done;
  const rows = policy === 'rollback' ? (await ctx.tw.history(ref)).rows : [];
  const rolledBack = policy === 'rollback' && !rows.some((r) => r.generation === first.generation);
  return { policy, second: result.status, rolledBack };
}

/**
 * A turn that ended waiting for an approval (A1–A4): the driver approves it, denies it, or lets
 * it time out, as the plan's variant says — then the resumed turn's result (approve, deny), or
 * the wait's end by its timeout, seen as the call's synthesized result (`timeout`).
 */
async function decide(
  ctx: DriverContext,
  spec: Omit<TurnSpec, 'content'>,
  token: string,
): Promise<{ approval: 'approved' | 'denied' | 'timed_out'; result?: TurnResult } | undefined> {
  const ref = { tenantId: ctx.tenantId, principal: ctx.principal, workstreamId: spec.workstreamId };
  ctx.observer.approval?.(spec.workstreamId, spec.variant);
  if (spec.variant === 'timeout') {
    // The wait ends by itself (approvals.timeoutMs): its call's synthesized result is the sign.
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline && !ctx.stop.aborted) {
      const status = await ctx.tw.status(ref);
      if (status.awaitingApproval === undefined && status.state === 'idle') return { approval: 'timed_out' };
      await new Promise((r) => setTimeout(r, 100));
    }
    return undefined;
  }
  const approved = spec.variant === 'approve';
  // A refusal (the demo stopping: SHUTTING_DOWN) leaves the turn undecided: its verdict says so.
  const decision = await (approved
    ? ctx.tw.approve({ ...ref, token })
    : ctx.tw.deny({ ...ref, token, reason: 'the demo driver said no' })
  ).catch(() => undefined);
  if (decision?.status !== 'resumed') return undefined;
  return { approval: approved ? 'approved' : 'denied', result: await decision.turn.done };
}

/** Runs the workstream's turns sequentially, then its idle check; returns every record. */
export async function driveWorkstream(ctx: DriverContext, plan: WorkstreamPlan): Promise<TurnRecord[]> {
  const records: TurnRecord[] = [];
  const total = plan.turns.length;
  const record = (r: TurnRecord) => {
    records.push(r);
    ctx.observer.turnFinished(r);
  };
  for (const turn of plan.turns) {
    if (ctx.stop.aborted) return records;
    record(
      await runTurn(ctx, {
        workstreamId: plan.id,
        index: turn.index,
        total,
        kind: turn.kind,
        variant: turn.variant,
        expected: EXPECTED[turn.kind],
        content: turn.content,
        ...(turn.followUp === undefined ? {} : { followUp: turn.followUp }),
      }),
    );
  }
  if (ctx.stop.aborted) return records;
  // L1/L3: whatever the last turn did, the workstream is idle again and completes a plain turn.
  record(
    await runTurn(ctx, {
      workstreamId: plan.id,
      index: total + 1,
      total,
      kind: 'idle-check',
      variant: 'plain',
      expected: 'completed',
      content: plan.idleCheck,
    }),
  );
  return records;
}
