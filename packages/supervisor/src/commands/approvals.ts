/**
 * Approvals (issue 26): a turn whose call needs a person's approval ends `awaiting_approval` —
 * its session waits in `tool-debt.awaiting-approval`, durable, holding no worker and no lease
 * (turn/settle.ts) — and a decision resumes it. `decide` checks the token against the durable
 * wait in the session's mailbox (a stale token, another decision, changes nothing), takes a
 * permit, a worker and the lease like a claim, makes the decided machine durable, then dispatches
 * a turn that goes on from the call (`TurnRequest.resume`): approved, it runs (with edited
 * arguments when given); denied, its result says so (effect `none`). A wait's bound is kept here:
 * unanswered by `approvals.timeoutMs`, the call is denied the way a cancel would (effect `none`).
 */
import {
  errors,
  type HistoryRow,
  SeamName,
  seam,
  type ToolCall,
  type TurnwardenError,
} from '@turnwarden/protocol';
import { contextOf, offer, waitingApproval } from '@turnwarden/session';
import type { Logger } from 'pino';
import type { Admission, Permit } from '../capacity/admission.js';
import type { SupervisorConfig } from '../config.js';
import type { CancelTimer, Timers } from '../liveness/timers.js';
import { acquireLease, repairLeftover } from '../sessions/maintenance.js';
import type { SessionRecord, Sessions } from '../sessions/sessions.js';
import type { RuntimeCounters } from '../stats.js';
import { schemaProblem } from '../tools/schema-check.js';
import { type ParsedToken, parseApprovalToken } from '../turn/approval-token.js';
import type { ClaimHost } from '../turn/claim.js';
import { Turn } from '../turn/turn.js';
import type { ClaimedTurn } from '../types.js';
import type { SendClaim, SendQueue } from './send-queue.js';

export interface DecisionInput {
  /** The workstream's key. */
  readonly workstreamId: string;
  readonly tenantId: string;
  readonly principal: string;
  readonly token: string;
  readonly approved: boolean;
  /** Approved with edited arguments: a JSON object's text. */
  readonly arguments?: string;
  readonly reason?: string;
}

export type Decided = { readonly resumed: ClaimedTurn } | { readonly alreadyDecided: true };

export interface ApprovalsDeps {
  readonly claims: ClaimHost;
  readonly sessions: Sessions;
  readonly admission: Pick<Admission, 'acquire'>;
  readonly queue: Pick<SendQueue, 'check'>;
  readonly timers: Timers;
  readonly logger: Logger;
  readonly counters: RuntimeCounters;
  readonly config: Pick<SupervisorConfig, 'admission' | 'limits'>;
  /**
   * Cluster mode: tells the other hosts when a wait begins here (they keep its timeout too) and
   * when one they were told of ended here (they drop it).
   */
  readonly cluster?: {
    waiting(workstreamId: string, nonce: string, expiresAt: number): void;
    ended(workstreamId: string, nonce: string): void;
  };
}

/** Where a wait's news came from: this host (told to the others), or another host's notice. */
interface Origin {
  readonly heard?: boolean;
}

export class Approvals {
  /** Each waiting session's timeout, by workstream, with the wait it bounds. */
  private readonly timeouts = new Map<string, { readonly nonce: string; readonly cancel: CancelTimer }>();
  /**
   * Decisions under way, by workstream: a timeout that fires while one waits for a worker or the
   * mailbox waits for it — a decision made in time is not lost to the wait for capacity.
   */
  private readonly deciding = new Map<string, Promise<unknown>>();
  private stopped = false;

  constructor(private readonly deps: ApprovalsDeps) {}

  /**
   * A session waits for an approval until `expiresAt`: then its call is denied (effect none). A
   * wait that began here is told to the other hosts, which keep its timeout too (A4).
   */
  waiting(workstreamId: string, nonce: string, expiresAt: number, { heard = false }: Origin = {}): void {
    if (this.stopped) return;
    this.timeouts.get(workstreamId)?.cancel();
    const cancel = this.deps.timers.after(Math.max(0, expiresAt - Date.now()), () => {
      if (this.timeouts.get(workstreamId)?.nonce === nonce) this.timeouts.delete(workstreamId);
      void this.expire(workstreamId, nonce);
    });
    this.timeouts.set(workstreamId, { nonce, cancel });
    if (!heard) this.deps.cluster?.waiting(workstreamId, nonce, expiresAt);
  }

  /**
   * The wait ended otherwise (decided, a cancel's repair, a close, a delete): its timeout goes —
   * on the other hosts too, told here. Another host's notice names the wait it ended (`nonce`):
   * a later wait of the workstream keeps its timeout.
   */
  ended(workstreamId: string, { heard = false, nonce }: Origin & { readonly nonce?: string } = {}): void {
    const timeout = this.timeouts.get(workstreamId);
    if (timeout === undefined || (nonce !== undefined && timeout.nonce !== nonce)) return;
    timeout.cancel();
    this.timeouts.delete(workstreamId);
    if (!heard) this.deps.cluster?.ended(workstreamId, timeout.nonce);
  }

  /** Timeouts kept here (stats, tests). */
  get kept(): number {
    return this.timeouts.size;
  }

  /** Tests and the harness: every wait's timeout fires now, as if its time had come. */
  expireNow(): void {
    for (const [workstreamId, { nonce, cancel }] of [...this.timeouts]) {
      cancel();
      this.timeouts.delete(workstreamId);
      void this.expire(workstreamId, nonce);
    }
  }

  /** Shutdown: no timeout fires any more (a restart keeps them again, recovery.ts). */
  stop(): void {
    this.stopped = true;
    for (const { cancel } of this.timeouts.values()) cancel();
    this.timeouts.clear();
  }

  /**
   * A decision the host made now (called as it calls, before anything is awaited): a timeout
   * that fires before it reaches the session waits for it — it was made in time.
   */
  track(workstreamId: string, decision: Promise<unknown>): void {
    const settled = decision.then(
      () => undefined,
      () => undefined,
    );
    this.deciding.set(workstreamId, settled);
    void settled.then(() => {
      if (this.deciding.get(workstreamId) === settled) this.deciding.delete(workstreamId);
    });
  }

  /**
   * Approves or denies the call a session waits for. Refused with a typed error, nothing
   * changed: a token that names no wait of this workstream (APPROVAL_STALE), a decision the other
   * way already taken (APPROVAL_DECIDED), edited arguments that are not a JSON object within
   * `limits.maxToolArgBytes` (INVALID_INPUT). The same decision again: `alreadyDecided`.
   */
  async decide(sent: SendClaim, input: DecisionInput): Promise<Decided> {
    const { sessions, admission, config } = this.deps;
    const { workstreamId } = input;
    const token = parseApprovalToken(input.token);
    if (token === undefined) throw stale(workstreamId, 'malformed');
    if (input.arguments !== undefined) checkArguments(input.arguments, config.limits.maxToolArgBytes);
    // Made, not yet admitted (waiting for a permit, or for the mailbox): a timeout now waits for it.
    const held = seam(SeamName.decisionToAdmit, { workstreamId });
    if (held !== undefined) await held;
    let permit: Permit | undefined = await admission.acquire(input.tenantId, {
      maxWaitMs: config.admission.maxWaitMs,
    });
    const rec = sessions.record(workstreamId);
    try {
      const step = await rec.run(async (): Promise<Decided | Turn> => {
        this.deps.queue.check(sent);
        const snapshot = await sessions.load(rec);
        const context = contextOf(snapshot);
        const waiting = waitingApproval(snapshot);
        const here =
          waiting !== undefined &&
          waiting.nonce === token.nonce &&
          waiting.callIndex === token.callIndex &&
          context.generation === token.generation;
        if (!here) {
          // Decided already — by this token, the same way or the other.
          if (context.decided?.nonce === token.nonce) {
            if (context.decided.approved === input.approved) return { alreadyDecided: true };
            throw errors.approvalDecided(
              `the approval was ${context.decided.approved ? 'approved' : 'denied'} already`,
              { workstreamId, approved: context.decided.approved },
            );
          }
          throw stale(workstreamId, context.generation !== token.generation ? 'generation' : 'not_waiting');
        }
        const turn = await this.resume(rec, input, token, permit!);
        permit = undefined; // the turn holds it now; its end releases it
        return turn;
      });
      if (!(step instanceof Turn)) {
        permit?.release();
        return step;
      }
      if (input.approved) this.deps.counters.approvalsApproved++;
      else this.deps.counters.approvalsDenied++;
      this.ended(workstreamId);
      return { resumed: step.run(sent, undefined) };
    } catch (e) {
      permit?.release();
      throw e;
    } finally {
      sessions.release(rec);
    }
  }

  /** The decided machine made durable under a lease, and the turn that goes on from the call. */
  private async resume(
    rec: SessionRecord,
    input: DecisionInput,
    token: ParsedToken,
    permit: Permit,
  ): Promise<Turn> {
    const host = this.deps.claims;
    const { workstreamId } = input;
    const waiting = rec.snapshot!;
    // The waiting call's rows (a waiting session's history changes only under a lease that takes
    // it out of its wait, checked below): edited arguments its tool's schema refuses are
    // INVALID_INPUT before anything is taken or written.
    const rows = await host.store.readHistory(workstreamId);
    const { user, assistant, steps } = turnSoFar(rows, token.generation);
    const calls: readonly ToolCall[] = assistant.role === 'assistant' ? (assistant.toolCalls ?? []) : [];
    const name = calls[token.callIndex]?.name;
    const schema = name === undefined ? undefined : host.pool.catalogue?.schemas[name];
    if (input.approved && input.arguments !== undefined && schema !== undefined) {
      const problem = schemaProblem(JSON.parse(input.arguments), schema);
      if (problem !== undefined) {
        throw errors.invalidInput(`the edited arguments do not fit ${name}: ${problem}`, {
          field: 'arguments',
          reason: problem,
        });
      }
    }
    const worker = await host.pool.acquire();
    try {
      await host.sessions.nextTurn();
      const lease = await acquireLease(host, workstreamId, rec, host.tenantLimit);
      try {
        // Another host may have ended the wait (a cancel, a decision) since it was loaded here:
        // the durable machine under this lease is the one decided.
        const durable = (await host.store.getWorkstream(workstreamId))?.session;
        if (durable === undefined || waitingApproval(durable)?.nonce !== token.nonce) {
          rec.snapshot = durable;
          throw stale(workstreamId, 'not_waiting');
        }
        const decision = {
          nonce: token.nonce,
          approved: input.approved,
          ...(input.approved && input.arguments !== undefined ? { arguments: input.arguments } : {}),
          ...(!input.approved && input.reason !== undefined ? { reason: input.reason } : {}),
        };
        const decided = offer(waiting, { type: 'DECIDE', ...decision });
        if (decided === undefined) throw stale(workstreamId, 'not_waiting');
        // Durable before it is answered: a crash from here on is a crash mid-call (S7 repairs it).
        await host.gate.write(workstreamId, () =>
          host.store.saveSession({ workstreamId, fencingToken: lease.token, session: decided }),
        );
        // The step is logged (`session transition`) once, as the worker reports it taking it.
        host.sessions.set(rec, decided, token.generation);
        host.logger.info(
          {
            workstreamId,
            generation: token.generation,
            callIndex: token.callIndex,
            approved: input.approved,
          },
          'approval decided; the turn resumes',
        );
        const history = host.models !== undefined ? [] : rows.map((r) => r.message);
        return new Turn(host, rec, {
          tenantId: input.tenantId,
          principal: user.role === 'user' ? (user.principal ?? input.principal) : input.principal,
          permit,
          generation: token.generation,
          lease,
          worker,
          history,
          user: user.role === 'user' ? user : { role: 'user', content: '' },
          claimed: waiting,
          resume: { steps, calls, decision },
        });
      } catch (e) {
        await host.store.releaseLease(workstreamId, host.holder, lease.token).catch(() => false);
        throw e;
      }
    } catch (e) {
      host.pool.release(worker);
      throw e;
    }
  }

  /** The wait ran out: the call is denied as a cancel would deny it (effect none), unless decided meanwhile. */
  private async expire(workstreamId: string, nonce: string): Promise<void> {
    const { sessions, logger, claims } = this.deps;
    // A decision under way (waiting for a worker) was made in time: it goes first.
    for (let pending = this.deciding.get(workstreamId); pending !== undefined; ) {
      await pending;
      const next = this.deciding.get(workstreamId);
      pending = next === pending ? undefined : next;
    }
    try {
      const denied = await sessions.idle(workstreamId, async (rec) => {
        if (rec.turn !== undefined || waitingApproval(rec.snapshot!)?.nonce !== nonce) return false;
        await repairLeftover(claims, rec, 'not approved in time');
        return true;
      });
      if (denied) {
        this.deps.counters.approvalsTimedOut++;
        logger.warn({ workstreamId }, 'approval timed out; the call is denied');
      }
    } catch (err) {
      // Another host holds it, or it is gone: nothing waits here any more.
      logger.info({ err, workstreamId }, 'approval timeout not applied');
    }
  }
}

/** The turn's user row, its last assistant message, and the model steps it took (commit keys `g<gen>:a<step>`). */
function turnSoFar(rows: readonly HistoryRow[], generation: number) {
  let user: HistoryRow['message'] = { role: 'user', content: '' };
  let assistant: HistoryRow['message'] = { role: 'assistant', content: '' };
  let steps = 0;
  for (const row of rows) {
    if (row.generation !== generation) continue;
    if (row.message.role === 'user') user = row.message;
    const step = /^g\d+:a(\d+)$/.exec(row.commitKey);
    if (row.message.role === 'assistant' && step !== null) {
      assistant = row.message;
      steps = Math.max(steps, Number(step[1]));
    }
  }
  return { user, assistant, steps };
}

function stale(workstreamId: string, reason: 'malformed' | 'generation' | 'not_waiting'): TurnwardenError {
  const why =
    reason === 'malformed'
      ? 'is not an approval token'
      : reason === 'generation'
        ? "names another turn's call"
        : 'names no call this workstream waits for';
  return errors.approvalStale(`the approval token ${why}`, { workstreamId, reason });
}

function checkArguments(text: string, maxBytes: number): void {
  if (Buffer.byteLength(text, 'utf8') > maxBytes) {
    throw errors.invalidInput(`arguments exceed ${maxBytes} bytes`, { field: 'arguments' });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw errors.invalidInput('arguments must be a JSON object', { field: 'arguments' });
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw errors.invalidInput('arguments must be a JSON object', { field: 'arguments' });
  }
}
