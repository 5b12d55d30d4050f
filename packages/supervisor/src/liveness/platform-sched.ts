/**
 * The platform's scheduler, for the supervisor's thread (runtime.ts). Apart from sched.ts so that
 * the watchdog's own thread, which imports sched.ts, does not load the session package to start.
 */
import { osThreadId } from '@turnwarden/session';
import { procSchedStats, type SchedulerStats } from './sched.js';

/**
 * The platform's scheduler statistics and the supervisor's own thread: on Linux with
 * `/proc/thread-self` and a readable schedstat, else undefined (no classification: the watchdog
 * behaves exactly as without this module).
 */
export function platformScheduler(): { readonly stats: SchedulerStats; readonly self: number } | undefined {
  const self = osThreadId();
  if (self === undefined || procSchedStats.sample(self) === undefined) return undefined;
  return { stats: procSchedStats, self };
}
