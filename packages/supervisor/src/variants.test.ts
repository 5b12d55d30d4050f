import { describe, expect, it } from 'vitest';
import { SendQueue } from './commands/send-queue.js';
import { JournalGate } from './journal/journal-gate.js';
import { AbortProtocol } from './liveness/abort-protocol.js';
import { Watchdog } from './liveness/watchdog.js';
import { EventHub } from './streams/events.js';
import { startForTesting } from './testing.js';
import { repairOpenCalls } from './turn/repair.js';
import { admitRewrite, rewritesInFlight } from './turn/rewrite.js';
import { installVariant, variant } from './variants.js';

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
