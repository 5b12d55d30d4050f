export { Activity, activityName } from './activity.js';
export type { MonotonicMs } from './clock.js';
export { ActivityClock, isFenced } from './clock.js';
export { TICKS_PER_MS } from './layout.js';
export { SlotStamp } from './stamp.js';
