/**
 * Every test file: a promise rejection nobody handled, or an exception nobody caught, during a
 * test fails that test — named, with the reason — instead of passing unnoticed or failing some
 * later test. Nothing in Turnwarden may leave a rejection unhandled.
 */
import { afterEach } from 'vitest';

const unhandled: unknown[] = [];
process.on('unhandledRejection', (reason) => {
  unhandled.push(reason);
});
process.on('uncaughtException', (error) => {
  unhandled.push(error);
});

afterEach(() => {
  if (unhandled.length === 0) return;
  const reasons = unhandled
    .splice(0)
    .map((r) => (r instanceof Error ? `${r.name}: ${r.message}` : String(r)));
  throw new Error(`unhandled rejection or exception during this test: ${reasons.join('; ')}`);
});
