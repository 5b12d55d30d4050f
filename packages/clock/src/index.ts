export { Activity, activityName } from './activity.js';
export { ActivityClock, isFenced } from './clock.js';
export type { MonotonicMs } from './clock.js';
export { SlotStamp } from './stamp.js';
export { TICKS_PER_MS } from './layout.js';
