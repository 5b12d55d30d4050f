import { describe, expect, it } from 'vitest';
import { AbortProtocol } from './abort-protocol.js';
import { EventHub } from './events.js';
import { JournalGate } from './journal-gate.js';
import { repairOpenCalls } from './repair.js';
import { admitRewrite, rewritesInFlight } from './rewrite.js';
import { SendQueue } from './send-queue.js';
import { startForTesting } from './testing.js';
import { installVariant, variant } from './variants.js';
import { Watchdog } from './watchdog.js';

describe('variants', () => {
  it("a host's build installs none: every part with a harness variant is the part itself", () => {
    // The testing entry loaded (as a host's tests and tools load it), not the harness's.
    expect(startForTesting).toBeTypeOf('function');
    const parts = [AbortProtocol, Watchdog, JournalGate, SendQueue, EventHub];
    for (const part of parts) expect(variant(part)).toBe(part);
    for (const fn of [repairOpenCalls, admitRewrite, rewritesInFlight]) expect(variant(fn)).toBe(fn);
  });

  it('an installed variant takes its part’s place', () => {
    const part = () => 'part';
    const replacement = () => 'variant';
    expect(variant(part)()).toBe('part');
    installVariant(part, replacement);
    expect(variant(part)()).toBe('variant');
  });
});
