/**
 * Named seams: the points in supervisor, worker and store code where the interleaving harness
 * (packages/harness) can park a thread, land a competing action, or inject a fault.
 *
 * Detached (production), a seam is one load of a module variable and a compare: `seam()`
 * returns undefined synchronously and the caller's code path is unchanged — no await is added.
 * Attached, a main-thread seam returns a promise that settles when the schedule releases it;
 * a worker seam blocks its thread on Atomics.wait (see packages/session/src/seam-client.ts).
 */
import { errors } from './errors.js';
import type { Mutation } from './mutations.js';

export const SeamName = {
  /** Supervisor: the watchdog sampled a stall; the commit CAS has not run (L4, L6, L7). */
  watchdogSampleToCommit: 'watchdog.sample→commit',
  /** Supervisor: the abort committed; the abort message is not yet posted to the worker (L6). */
  watchdogCommitToPublish: 'watchdog.commit→publish',
  /** Supervisor: a journal request arrived from a worker; not yet admitted (L3, P6). */
  journalAdmit: 'journal.admit',
  /** Supervisor: a journal batch is durable; its rows are not announced yet (E2). */
  journalDurableToAnnounce: 'journal.durable→announce',
  /** Supervisor: a history rewrite was admitted under a live turn; its write has not run (L8). */
  rewriteAdmitToWrite: 'rewrite.admit→write',
  /** Supervisor: a send captured its claim; it has not been queued or admitted yet (C7). */
  sendCaptureToEnqueue: 'send.capture→enqueue',
  /** Supervisor: the host made a decision (approve, deny); it has no permit and is not in the mailbox yet (A4). */
  decisionToAdmit: 'decision.made→admit',
  /** Supervisor: a claim was captured; the turn is not yet dispatched to its worker (C7). */
  claimCaptureToDispatch: 'claim.capture→dispatch',
  /** Worker: a model stream event arrived; it has not stamped the clock yet (L4, L6). */
  workerStreamEvent: 'worker.stream-event',
  /** Worker: a tool result is in hand; it has not been journaled yet (L3, S5). */
  workerToolToJournal: 'worker.tool→journal',
} as const;
export type SeamName = (typeof SeamName)[keyof typeof SeamName];

export type SeamFault =
  /** The seam throws (a publish that raises, a store that rejects). */
  | { readonly kind: 'throw'; readonly message: string }
  /** Worker seams only: the worker thread exits on the spot. */
  | { readonly kind: 'crash' }
  /** The seam is slow. */
  | { readonly kind: 'delay'; readonly ms: number }
  /** Journal seam only: the write happens, its acknowledgement is lost (the caller sees an error). */
  | { readonly kind: 'lose-ack' };

export type SeamContext = Readonly<Record<string, string | number | boolean | undefined>>;

/** What the supervisor's thread consults at its seams. */
export interface MainSeamController {
  /** Undefined: pass straight through. A promise: parked until it settles (with a fault, or none). */
  reach(name: SeamName, ctx: SeamContext): Promise<SeamFault | undefined> | undefined;
  readonly mutations: ReadonlySet<Mutation>;
}

/** What a session worker's seam client calls (synchronously, parking its thread). */
export type WorkerSeamFn = (name: SeamName, generation: number, detail: string | number) => void;

let mainController: MainSeamController | undefined;
let workerSeamFn: WorkerSeamFn | undefined;

export function attachSeamController(controller: MainSeamController): void {
  if (mainController !== undefined && mainController !== controller) {
    throw errors.invalidConfig('another harness is already attached in this thread');
  }
  mainController = controller;
}

export function detachSeamController(controller: MainSeamController): void {
  if (mainController === controller) mainController = undefined;
}

export function attachWorkerSeams(fn: WorkerSeamFn): void {
  workerSeamFn = fn;
}

/** Applies throw and delay faults; hands `lose-ack` back to the call site, which owns the write. */
function applyFault(fault: SeamFault | undefined): Promise<SeamFault | undefined> | SeamFault | undefined {
  if (fault === undefined) return undefined;
  switch (fault.kind) {
    case 'lose-ack':
      return fault;
    case 'throw':
      throw errors.internal(fault.message, { injected: true });
    case 'delay':
      return new Promise((resolve) => setTimeout(() => resolve(undefined), fault.ms));
    case 'crash':
      throw errors.internal('crash faults apply to worker seams only');
  }
}

/**
 * A main-thread seam. Undefined (synchronously) when no harness is attached or it passes;
 * otherwise a promise that settles when the schedule releases it — rejecting for a `throw`
 * fault, resolving with a fault the call site must apply itself (`lose-ack`), or undefined.
 */
export function seam(name: SeamName, ctx: SeamContext): Promise<SeamFault | undefined> | undefined {
  const c = mainController;
  if (c === undefined) return undefined;
  const held = c.reach(name, ctx);
  return held === undefined ? undefined : held.then(applyFault);
}

/**
 * A worker-thread seam: blocks the thread while the harness holds it. Its context is passed as
 * primitives, so a detached seam on the per-token path allocates nothing.
 */
export function seamSync(name: SeamName, generation: number, detail: string | number): void {
  const fn = workerSeamFn;
  if (fn !== undefined) fn(name, generation, detail);
}

/** The attached harness's controller, if any (read by ./mutations.ts; not part of the index). */
export function attachedSeamController(): MainSeamController | undefined {
  return mainController;
}

/** Links a harness to a supervisor: its main-thread controller and the worker channel. */
export interface HarnessLink {
  readonly controller: MainSeamController;
  /**
   * A worker reached a seam and is parked; `release` lets it go (with a fault, or none). Called
   * on the supervisor's thread when the worker's arrival message is received.
   */
  workerArrived(
    workerId: number,
    arrival: { readonly name: SeamName; readonly ctx: SeamContext },
    release: (fault?: SeamFault) => void,
  ): void;
}
