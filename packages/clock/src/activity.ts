/** What a turn was doing when it stamped the clock. Every code is progress (never lease renewal). */
export const Activity = {
  idle: 0,
  turnEntry: 1,
  modelRequest: 2,
  streamToken: 3,
  toolStart: 4,
  toolHeartbeat: 5,
  toolResult: 6,
  journal: 7,
  armed: 8,
  /** A model provider's heartbeat: waiting on a live request without output yet. */
  modelHeartbeat: 9,
  /** A shared model thread's own beat: its event loop turns (its liveness, not a turn's progress). */
  threadBeat: 10,
} as const;
export type Activity = (typeof Activity)[keyof typeof Activity];

const NAMES: readonly string[] = Object.keys(Activity);

export function activityName(code: number): string {
  return NAMES[code] ?? `code-${code}`;
}
