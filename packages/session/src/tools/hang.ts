/**
 * Deliberate hangs, for demonstrating and testing the watchdog. Never call these in a test
 * process: they hang the thread for good.
 */

/** A synchronous infinite loop: blocks the thread; only terminating the worker ends it. */
export function spinForever(): never {
  for (;;) {
    // Spin: nothing on this thread runs again.
  }
}

/** A promise that never settles and ignores every signal (a wedged await). */
export function stallForever(): Promise<never> {
  return new Promise<never>(() => undefined);
}
