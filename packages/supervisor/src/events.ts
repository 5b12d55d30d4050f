/**
 * Event fan-out to listeners, per workstream. Ids increase monotonically per workstream (E1).
 * A listener that throws is logged and kept; `closeWorkstream` delivers `ws_closed` and removes
 * every listener (D6).
 */
import type { Logger } from 'pino';

export type TurnwardenEventType =
  | 'turn_started'
  | 'state'
  | 'token'
  | 'tool_started'
  | 'tool_finished'
  | 'message'
  | 'watchdog_fired'
  | 'watchdog_declined'
  | 'turn_aborted'
  | 'warning'
  | 'tool_results_synthesized'
  | 'stream_end'
  | 'idle'
  | 'persistence'
  | 'history_resync'
  | 'ws_closed';

export interface TurnwardenEvent {
  /** Monotonic per workstream (E1). */
  readonly id: number;
  readonly workstreamId: string;
  readonly type: TurnwardenEventType;
  readonly generation?: number;
  readonly data: Readonly<Record<string, unknown>>;
}

export type Listener = (event: TurnwardenEvent) => void;

export class EventHub {
  private readonly listeners = new Map<string, Set<Listener>>();
  private readonly lastId = new Map<string, number>();

  constructor(private readonly logger: Logger) {}

  emit(
    workstreamId: string,
    type: TurnwardenEventType,
    generation: number | undefined,
    data: Record<string, unknown> = {},
  ): TurnwardenEvent {
    const id = (this.lastId.get(workstreamId) ?? 0) + 1;
    this.lastId.set(workstreamId, id);
    const event: TurnwardenEvent =
      generation === undefined
        ? { id, workstreamId, type, data }
        : { id, workstreamId, type, generation, data };
    const set = this.listeners.get(workstreamId);
    if (set) {
      for (const listener of [...set]) {
        try {
          listener(event);
        } catch (err) {
          this.logger.warn({ err, workstreamId, type }, 'event listener threw');
        }
      }
    }
    return event;
  }

  subscribe(workstreamId: string, listener: Listener): () => void {
    let set = this.listeners.get(workstreamId);
    if (!set) {
      set = new Set();
      this.listeners.set(workstreamId, set);
    }
    set.add(listener);
    return () => {
      const s = this.listeners.get(workstreamId);
      s?.delete(listener);
      if (s?.size === 0) this.listeners.delete(workstreamId);
    };
  }

  /** Terminal quiesce: every listener receives `ws_closed`, then is removed. */
  closeWorkstream(workstreamId: string, data: Record<string, unknown> = {}): void {
    this.emit(workstreamId, 'ws_closed', undefined, data);
    this.listeners.delete(workstreamId);
  }

  listenerCount(workstreamId: string): number {
    return this.listeners.get(workstreamId)?.size ?? 0;
  }
}
