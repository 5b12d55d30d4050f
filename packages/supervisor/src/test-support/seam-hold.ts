/**
 * Holds the next arrivals at the named main-thread seams until the test releases them, one
 * release per arrival, in arrival order: the test, not timing, decides what overlaps. Pass
 * `harness` to the runtime (`startRuntime({ harness })`); call `releaseAll` after the test so
 * that a failed test's runtime still shuts down.
 */
import type { HarnessLink, SeamName } from '@turnwarden/protocol';

export interface SeamHold {
  readonly harness: HarnessLink;
  /** Stops holding and lets every held arrival go (cleanup). */
  releaseAll(): void;
  /** Resolves once an arrival is held at `name` (now, if one already is). */
  arrived(name: SeamName): Promise<void>;
  /** Lets the oldest held arrival at `name` go. */
  release(name: SeamName): void;
  /** Stops holding anything (later arrivals pass). */
  disarm(): void;
  /** Holds again (later arrivals are held). */
  arm(): void;
}

export function seamHold(...names: SeamName[]): SeamHold {
  const held = new Map<SeamName, (() => void)[]>();
  const waiting = new Map<SeamName, (() => void)[]>();
  let armed = true;
  const harness: HarnessLink = {
    controller: {
      mutations: new Set(),
      reach: (name) => {
        if (!armed || !names.includes(name)) return undefined;
        return new Promise((resolve) => {
          held.set(name, [...(held.get(name) ?? []), () => resolve(undefined)]);
          for (const w of waiting.get(name)?.splice(0) ?? []) w();
        });
      },
    },
    workerArrived: (_id, _arrival, go) => go(),
  };
  return {
    harness,
    releaseAll(): void {
      armed = false;
      for (const list of held.values()) for (const go of list.splice(0)) go();
    },
    arrived(name: SeamName): Promise<void> {
      if ((held.get(name)?.length ?? 0) > 0) return Promise.resolve();
      return new Promise((resolve) => waiting.set(name, [...(waiting.get(name) ?? []), resolve]));
    },
    release(name: SeamName): void {
      const next = held.get(name)?.shift();
      if (next === undefined) throw new Error(`nothing is held at ${name}`);
      next();
    },
    disarm(): void {
      armed = false;
    },
    arm(): void {
      armed = true;
    },
  };
}
