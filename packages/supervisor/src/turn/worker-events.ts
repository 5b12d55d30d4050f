/**
 * What a running turn's worker reports, mapped to the session and to listeners: its machine's
 * transitions (the session moves with them, and each snapshot becomes durable in order with
 * the turn's rows, so a crash restores the state the machine was last known in), tokens, and
 * tool starts and ends. Once an abort committed the supervisor owns the machine: the worker's
 * later transitions are ignored.
 */
import type { WorkerEvent } from '@turnwarden/protocol';
import type { JournalGate } from '../journal/journal-gate.js';
import type { SessionRecord, Sessions } from '../sessions/sessions.js';
import type { EventHub } from '../streams/events.js';
import type { Turn } from './turn.js';

export interface WorkerEventHost {
  readonly gate: JournalGate;
  readonly sessions: Sessions;
  readonly events: EventHub;
}

export function onWorkerEvent(
  host: WorkerEventHost,
  rec: SessionRecord,
  turn: Turn,
  event: WorkerEvent,
): void {
  if (!('generation' in event) || event.generation !== turn.generation || turn.ending) return;
  const { workstreamId, generation } = turn;
  switch (event.t) {
    case 'state': {
      if (turn.aborted) return;
      const { snapshot } = event;
      host.sessions.set(rec, snapshot, generation, { from: event.from, via: event.via });
      host.gate
        .saveSession({ workstreamId, generation, fencingToken: turn.lease.token, session: snapshot })
        .catch((err: unknown) =>
          turn.log.warn({ err }, 'session snapshot not saved; the durable one is older'),
        );
      return;
    }
    case 'token':
      host.events.emit(workstreamId, 'token', generation, { text: event.text });
      return;
    case 'tool_started':
      host.events.emit(workstreamId, 'tool_started', generation, {
        callIndex: event.callIndex,
        id: event.id,
        name: event.name,
      });
      return;
    case 'tool_finished':
      host.events.emit(workstreamId, 'tool_finished', generation, {
        callIndex: event.callIndex,
        isError: event.isError,
      });
      return;
  }
}
