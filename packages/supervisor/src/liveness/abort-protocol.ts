/**
 * The abort protocol (L1–L7, L11): the watchdog's delegate. It reports the observational stage
 * (`fired`) and the declines, and hands a commit to the turn on the slot, whose `abort` runs the
 * definitive stage (renewal stops, logs, events, the abort message, the grace timer: turn/).
 */
import type { Logger } from 'pino';
import type { SupervisorConfig } from '../config.js';
import type { RuntimeCounters } from '../stats.js';
import type { EventHub } from '../streams/events.js';
import type { Turn } from '../turn/turn.js';
import { LogMessage, observationalWarning } from './reporting.js';
import type { StallInfo, StarvedInfo, WatchdogDelegate, WatchedTurn } from './watchdog.js';

/** What the protocol needs of the engine. */
export interface AbortHost {
  readonly config: SupervisorConfig;
  readonly events: EventHub;
  readonly counters: RuntimeCounters;
  readonly logger: Logger;
  turnOnSlot(slot: number): Pick<Turn, 'watched' | 'log' | 'abort'> | undefined;
}

export class AbortProtocol implements WatchdogDelegate {
  constructor(protected readonly host: AbortHost) {}

  fired(w: WatchedTurn, info: StallInfo): void {
    this.host.counters.watchdogFired++;
    const turn = this.host.turnOnSlot(w.slot);
    const log = turn?.log ?? this.host.logger;
    // L5, observational stage: may still decline.
    log.error(
      {
        workstreamId: info.workstreamId,
        idleMs: info.idleMs,
        lastActivity: info.lastActivity,
        bound: info.bound,
        // Where the scheduler was read: the turn was running (wedged) or asleep (stalled).
        ...(info.sched === undefined
          ? {}
          : {
              verdict: info.sched.verdict,
              runShare: info.sched.runShare,
              waitShare: info.sched.waitShare,
              windowMs: info.sched.windowMs,
            }),
      },
      LogMessage.fired,
    );
    // What a host can act on; the clock slot and the sampled version stay inside.
    this.host.events.emit(info.workstreamId, 'watchdog_fired', info.generation, {
      bound: info.bound,
      idleMs: info.idleMs,
      lastActivity: info.lastActivity,
    });
    this.host.events.emit(info.workstreamId, 'warning', info.generation, {
      stage: 'observational',
      message: observationalWarning(info, this.host.config.watchdog.turnDeadlineMs),
    });
  }

  declined(w: WatchedTurn, info: StallInfo, why: string, err: unknown): void {
    this.host.counters.abortsDeclined++;
    const log = this.host.turnOnSlot(w.slot)?.log ?? this.host.logger;
    if (why === 'failed') {
      log.warn({ err, workstreamId: info.workstreamId }, LogMessage.declinedFailed);
    } else {
      log.info({ workstreamId: info.workstreamId, why }, LogMessage.declined);
    }
    this.host.events.emit(info.workstreamId, 'watchdog_declined', info.generation, { why });
  }

  /**
   * Past its idle bound but starved of CPU: no stage fires (nothing was attempted); one warning
   * per window, with the shares it was judged on, so an operator sees the host — not the turn —
   * holding the silence.
   */
  starved(w: WatchedTurn, info: StarvedInfo): void {
    const log = this.host.turnOnSlot(w.slot)?.log ?? this.host.logger;
    const { reading } = info;
    log.warn(
      {
        workstreamId: info.workstreamId,
        idleMs: info.idleMs,
        lastActivity: info.lastActivity,
        waitShare: reading.waitShare,
        runShare: reading.runShare,
        windowMs: reading.windowMs,
        runMs: reading.runMs,
        deferrals: info.deferrals,
        threads: info.threads,
      },
      LogMessage.starved,
    );
  }

  /** The watchdog's CAS set the fence: the turn commits its abort (turn/turn.ts, the definitive stage). */
  committed(w: WatchedTurn, info: StallInfo): void {
    const turn = this.host.turnOnSlot(w.slot);
    if (!turn || turn.watched !== w) return;
    turn.abort(info.bound === 'idle' ? 'watchdog' : info.bound, { stall: info });
  }
}
