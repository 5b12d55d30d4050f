import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';

/**
 * Lowers the calling thread's scheduling priority by `nice` steps (capped at 19, the lowest).
 * On Linux, `setpriority` with pid 0 applies to the calling thread alone, so a session worker
 * can yield to the supervisor's thread without touching it. Elsewhere it would apply to the
 * whole process, so nothing is done. Returns the thread's new nice value, or undefined when
 * nothing changed (not Linux, nothing asked, or refused by the system).
 */
export function lowerThreadPriority(
  nice: number,
  platform: NodeJS.Platform = process.platform,
): number | undefined {
  if (!(nice > 0) || platform !== 'linux') return undefined;
  try {
    const target = Math.min(19, getPriority() + nice);
    setPriority(target);
    return target;
  } catch {
    return undefined;
  }
}

/**
 * The calling thread's OS thread id: on Linux `/proc/thread-self` links to `<pid>/task/<tid>`;
 * undefined elsewhere or when /proc is not mounted. A session worker reports it in its `ready`
 * event, so the supervisor's watchdog can read what the scheduler says of the thread
 * (`/proc/self/task/<tid>/schedstat`: on-CPU time and run-queue wait).
 */
export function osThreadId(platform: NodeJS.Platform = process.platform): number | undefined {
  if (platform !== 'linux') return undefined;
  try {
    const match = /\/task\/(\d+)$/.exec(readlinkSync('/proc/thread-self'));
    return match ? Number(match[1]) : undefined;
  } catch {
    return undefined;
  }
}
