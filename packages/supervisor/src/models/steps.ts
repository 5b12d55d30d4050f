/**
 * A running turn's model calls in the `shared` placement (`HostApi.modelStep`): the session's
 * worker asks, and sleeps; the call runs on a shared model thread (threads.ts) that stamps the
 * turn's clock slot per event, so the watchdog sees a streaming turn exactly as before. The call
 * is admitted from the live turn only — its generation, no abort committed, the slot not fenced
 * (as its rows are, L3) — after every event the worker posted before it (its `streaming` step),
 * so listeners hear of the step before its first token. The turn holds the call while it runs:
 * the turn's abort reaches the provider's request, and so does its end.
 */
import type { HistoryMessage, ModelStepRequest, ModelStepResult } from '@turnwarden/protocol';
import { errors } from '@turnwarden/protocol';
import type { TurnStore } from '@turnwarden/store';
import type { EventHub } from '../streams/events.js';
import type { Turn } from '../turn/turn.js';
import type { ModelThreads } from './threads.js';

export interface ModelStepsHost {
  readonly store: Pick<TurnStore, 'readHistory'>;
  readonly events: EventHub;
  /** The running turn of a workstream, if any. */
  turnOf(workstreamId: string): Turn | undefined;
  /** Whether the turn's clock slot carries a committed fence. */
  fenced(turn: Turn): boolean;
}

export class ModelSteps {
  constructor(
    private readonly host: ModelStepsHost,
    private readonly threads: ModelThreads,
  ) {}

  async step(
    req: ModelStepRequest,
    caughtUp: (turn: Turn, n: number) => Promise<void>,
  ): Promise<ModelStepResult> {
    const { workstreamId, generation } = req;
    await caughtUp(this.live(req), req.eventsPosted);
    // Where the store has no view another thread can open (an in-memory database), the context
    // is read here and travels with the call.
    let history: readonly HistoryMessage[] | undefined;
    if (!this.threads.readsContext) {
      this.live(req);
      history = (await this.host.store.readHistory(workstreamId)).map((r) => r.message);
    }
    const turn = this.live(req);
    const { events } = this.host;
    const call = this.threads.run(
      {
        workstreamId,
        generation,
        slot: turn.worker.slot,
        onText: (text) => {
          if (!turn.ending) events.emit(workstreamId, 'token', generation, { text });
        },
      },
      req.model,
      req.tools,
      history,
    );
    turn.modelCallStarted(call);
    try {
      return await call.result;
    } finally {
      turn.modelCallEnded(call);
    }
  }

  /** The call's turn, if it is still the live one (L3); else refused as a late row would be. */
  private live(req: ModelStepRequest): Turn {
    const turn = this.host.turnOf(req.workstreamId);
    if (
      turn === undefined ||
      turn.generation !== req.generation ||
      turn.aborted !== undefined ||
      turn.ending ||
      this.host.fenced(turn)
    ) {
      throw errors.fenced(`turn ${req.generation} of ${req.workstreamId} is no longer live`);
    }
    return turn;
  }
}
