/**
 * M3 — an interrupt racing the running turn's last tool result (issue 26). A two-tool turn runs;
 * the host sends its next message with the double-texting policy `interrupt` at any point — while
 * a tool result is in hand but not journaled, while its journal request is held at admission,
 * after the last result landed, as the turn settles. The turn ends once: completed (the interrupt
 * came after it was done) or interrupted by the cancel, every call answered either way; the
 * interrupting send is never refused, and its turn is the very next one, started only after the
 * interrupted turn went idle, over a complete history.
 */
import { SeamName } from '@turnwarden/protocol';
import { interruptNext, type Scenario } from '../scenario.js';
import { TWO_TOOL_CALLS, turnOverOpenCalls } from './scripts.js';

export const m3: Scenario = {
  id: 'M3',
  title:
    'an interrupt racing the running turn’s last tool result: the turn ends once, every call answered, and the interrupting message’s turn is the next',
  park: [SeamName.workerToolToJournal, SeamName.journalAdmit],
  script: TWO_TOOL_CALLS,
  actions: [interruptNext],
  maxSteps: 10,
  invariants: [
    {
      id: 'ends-once',
      guarantee: 'M3',
      check: (r) => {
        const res = r.result;
        if (res === undefined) return 'the scheduled turn has no result';
        if (res.status === 'completed') return undefined;
        if (res.status === 'interrupted' && res.abortReason === 'cancel') return undefined;
        return `the scheduled turn ended ${res.status} (${res.abortReason ?? 'no abort'})`;
      },
    },
    {
      id: 'interrupt-ends-a-running-turn',
      guarantee: 'M3',
      check: (r) => {
        const next = r.next;
        const g = r.result?.generation;
        if (next === undefined || g === undefined) return undefined;
        // Before the last call's result was durable the turn was surely running: the interrupt ends it.
        const lastResultDurable = r.events
          .slice(0, next.eventsAtSend)
          .some(
            (e) =>
              e.type === 'message' &&
              e.generation === g &&
              e.data.message.role === 'tool' &&
              e.data.message.callIndex === 1,
          );
        if (!lastResultDurable && r.result?.status !== 'interrupted')
          return `interrupted while its last call had no result, the turn ended ${r.result?.status}`;
        return undefined;
      },
    },
    {
      id: 'interrupt-runs-next',
      guarantee: 'M3',
      check: (r) => {
        const next = r.next;
        if (next === undefined) return undefined;
        if (next.outcome !== 'accepted') return `the interrupting send ended ${next.outcome}`;
        const g = r.result?.generation;
        if (g === undefined) return undefined;
        if (next.generation !== g + 1)
          return `the interrupting send's turn is generation ${next.generation}, not the next (${g + 1})`;
        const idleAt = r.events.findIndex((e) => e.type === 'idle' && e.generation === g);
        const startedAt = r.events.findIndex(
          (e) => e.type === 'turn_started' && e.generation === next.generation,
        );
        if (idleAt < 0 || startedAt < idleAt)
          return 'the interrupting turn started before the interrupted one went idle';
        return undefined;
      },
    },
    {
      id: 'starts-over-a-complete-history',
      guarantee: 'S1',
      check: (r) => turnOverOpenCalls(r.history),
    },
  ],
};
