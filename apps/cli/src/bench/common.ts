/** Shared pieces of the bench sections: context, silent logger, scripts, per-turn event times. */
import type { Turnwarden, TurnwardenEvent } from '@turnwarden/supervisor';
import { type Logger, pino } from 'pino';

export interface BenchContext {
  readonly quick: boolean;
  /** Silent: the bench reports figures, not logs. */
  readonly logger: Logger;
}

export const TENANT = 'bench';
export const PRINCIPAL = 'bench-user';

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}

/** A scripted-model message (see packages/session/README.md). */
export function script(steps: readonly Record<string, unknown>[]): string {
  return JSON.stringify({ script: steps });
}

/** performance.now() at which the events of one turn reached the host's listener. */
export interface TurnTimes {
  tokens: number;
  lastToken?: number;
  fired?: number;
  aborted?: number;
  idle?: number;
}

/** Records, per generation, when a workstream's events arrived. */
export class TurnTimeline {
  private readonly byGeneration = new Map<number, TurnTimes>();
  private unsubscribe: () => void = () => {};

  private constructor() {}

  /** Follows one workstream of the bench tenant. */
  static async follow(
    tw: Turnwarden,
    workstreamId: string,
    onToken?: (e: TurnwardenEvent, at: number) => void,
  ): Promise<TurnTimeline> {
    const timeline = new TurnTimeline();
    timeline.unsubscribe = await tw.subscribe({
      tenantId: TENANT,
      principal: PRINCIPAL,
      workstreamId,
      listener: (e) => {
        const at = performance.now();
        if (e.generation === undefined) return;
        let t = timeline.byGeneration.get(e.generation);
        if (!t) {
          t = { tokens: 0 };
          timeline.byGeneration.set(e.generation, t);
        }
        switch (e.type) {
          case 'token':
            t.tokens++;
            t.lastToken = at;
            onToken?.(e, at);
            break;
          case 'watchdog_fired':
            t.fired ??= at;
            break;
          case 'turn_aborted':
            t.aborted ??= at;
            break;
          case 'idle':
            t.idle ??= at;
            break;
          default:
            break;
        }
      },
    });
    return timeline;
  }

  get(generation: number): TurnTimes {
    return this.byGeneration.get(generation) ?? { tokens: 0 };
  }

  close(): void {
    this.unsubscribe();
  }
}

/** Settles with the promise's value, or with `undefined` after `ms`. */
export async function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export function errorText(e: unknown): string {
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  return String(e);
}
