/**
 * Drives one workstream: its planned turns in order, then the idle check. A send refused for
 * capacity (CAPACITY_EXHAUSTED, retryable: T4) is retried after a short jittered backoff;
 * any other refusal is recorded as the turn's outcome.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { ErrorCode, isTurnwardenError } from '@turnwarden/protocol';
import type { TurnHandle, Turnwarden } from '@turnwarden/supervisor';
import { classifyTurn } from './integrity.js';
import type { RecordKind, TurnRecord } from './types.js';
import { EXPECTED, type Expectation, type WorkstreamPlan } from './workload.js';

export interface DemoObserver {
  /** The workstream's send was refused for capacity and is backing off. */
  waiting(workstreamId: string): void;
  /** A send was accepted. */
  turnStarted(workstreamId: string, index: number, kind: RecordKind): void;
  turnFinished(record: TurnRecord): void;
  /** The host force-cancels a workstream's turn (a cancel turn). */
  forceCancel?(workstreamId: string): void;
}

export interface DriverContext {
  readonly tw: Turnwarden;
  readonly tenantId: string;
  readonly principal: string;
  /** Aborted when the demo is stopped early: no new sends. */
  readonly stop: AbortSignal;
  readonly observer: DemoObserver;
  /** Backoff jitter source. */
  readonly rand: () => number;
}

const BACKOFF_MIN_MS = 10;
const BACKOFF_MAX_MS = 100;

interface Sent {
  readonly handle?: TurnHandle;
  readonly error?: unknown;
  readonly refusals: number;
  readonly waitMs: number;
}

async function sendWithRetry(ctx: DriverContext, workstreamId: string, content: string): Promise<Sent> {
  const started = performance.now();
  let refusals = 0;
  let delay = BACKOFF_MIN_MS;
  for (;;) {
    const waitMs = () => Math.round(performance.now() - started);
    if (ctx.stop.aborted) return { error: ctx.stop.reason, refusals, waitMs: waitMs() };
    try {
      const handle = await ctx.tw.send({
        tenantId: ctx.tenantId,
        principal: ctx.principal,
        workstreamId,
        content,
      });
      return { handle, refusals, waitMs: waitMs() };
    } catch (error) {
      if (!isTurnwardenError(error, ErrorCode.CAPACITY_EXHAUSTED))
        return { error, refusals, waitMs: waitMs() };
      refusals++;
      ctx.observer.waiting(workstreamId);
      await sleep(Math.round(delay * (0.5 + ctx.rand())), undefined, { signal: ctx.stop }).catch(
        () => undefined,
      );
      delay = Math.min(delay * 2, BACKOFF_MAX_MS);
    }
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
  const { content, ...base } = spec;
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
  const sent = await sendWithRetry(ctx, spec.workstreamId, content);
  const timing = { refusals: sent.refusals, waitMs: sent.waitMs };
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
  const result = await sent.handle.done; // never rejects
  return {
    ...base,
    ...timing,
    generation: result.generation,
    status: result.status,
    ...(result.abortReason === undefined ? {} : { abortReason: result.abortReason }),
    workerTerminated: result.workerTerminated,
    synthesized: result.synthesized,
    durationMs: Math.round(performance.now() - t0),
    ...(result.error === undefined
      ? {}
      : { errorCode: result.error.code, errorMessage: result.error.message }),
    verdict: classifyTurn(spec.expected, { ...result, errorCode: result.error?.code }),
  };
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
