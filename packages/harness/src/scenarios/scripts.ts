import { type HistoryRow, openToolCalls } from '@turnwarden/protocol';

/** A turn that calls two tools in one assistant message, then answers. */
export const TWO_TOOL_CALLS = JSON.stringify({
  script: [
    {
      tools: [
        { name: 'echo', args: { text: 'first' } },
        { name: 'echo', args: { text: 'second' } },
      ],
    },
    { text: 'done' },
  ],
});

/** A call that needs approval (the harness runtime's `approvals.tools`), then one that does not; then the answer. */
export const WAITS_FOR_APPROVAL = JSON.stringify({
  script: [
    {
      tools: [
        { name: 'heartbeat', args: { ms: 1, everyMs: 1 } },
        { name: 'echo', args: { text: 'after the approved call' } },
      ],
    },
    { text: 'both done' },
  ],
});

/** S3: the first user row of the durable history that follows open calls, described; else undefined. */
export function turnOverOpenCalls(history: readonly HistoryRow[]): string | undefined {
  for (let i = 0; i < history.length; i++) {
    if (history[i]!.message.role !== 'user') continue;
    const open = openToolCalls(history.slice(0, i));
    if (open.length > 0) return `a turn (seq ${history[i]!.seq}) started over ${open.length} open call(s)`;
  }
  return undefined;
}
