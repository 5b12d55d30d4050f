/**
 * The harness's end of the seams: it implements the supervisor's `HarnessLink`. A thread that
 * reaches a seam the scenario parks at is held here — a main-thread seam as an unresolved
 * promise, a worker seam as a worker blocked on Atomics.wait — until the schedule releases it.
 */
import type {
  HarnessLink,
  MainSeamController,
  Mutation,
  SeamContext,
  SeamFault,
  SeamName,
} from '@turnwarden/protocol';

export interface Parked {
  /** Logical thread: `S` (watchdog), `J` (journal), `N` (a durable batch's announcement), `D` (dispatch), `W<generation>` (a turn's worker). */
  readonly thread: string;
  readonly seam: SeamName;
  readonly ctx: SeamContext;
  /** The step label the schedulers see: `thread:seam`. */
  readonly label: string;
  release(fault?: SeamFault): void;
}

const MAIN_THREAD: Partial<Record<SeamName, string>> = {
  'watchdog.sample→commit': 'S',
  'watchdog.commit→publish': 'S',
  'journal.admit': 'J',
  'journal.durable→announce': 'N',
  'rewrite.admit→write': 'R',
  'claim.capture→dispatch': 'D',
  'send.capture→enqueue': 'Q',
  'decision.made→admit': 'P',
};

export class SeamHarness implements HarnessLink {
  readonly controller: MainSeamController;
  private readonly parked = new Map<string, Parked>();
  private waiters: (() => void)[] = [];
  private parkAt: ReadonlySet<SeamName>;
  private mutations: ReadonlySet<Mutation>;
  private armed = true;
  private readonly passing = new Set<SeamName>();
  /** The worker whose seams the run schedules; arrivals from any other worker pass (and count). */
  private scheduledWorker: number | undefined;
  /** Arrivals from a worker the run does not schedule: a previous run leaking into this one. */
  strays = 0;

  constructor(parkAt: ReadonlySet<SeamName>, mutations: ReadonlySet<Mutation>) {
    this.parkAt = parkAt;
    this.mutations = mutations;
    const self = this;
    this.controller = {
      get mutations() {
        return self.mutations;
      },
      reach: (name, ctx) => {
        if (!this.armed || !this.parkAt.has(name)) return undefined;
        if (this.passing.delete(name)) return undefined;
        return new Promise<SeamFault | undefined>((resolve) => {
          this.arrive(MAIN_THREAD[name] ?? 'M', name, ctx, resolve);
        });
      },
    };
  }

  /**
   * Prepares the next run on a reused runtime: its seams and mutations, armed, nothing parked,
   * no scheduled worker yet. Returns what the previous run left behind (nothing, on a clean reset).
   */
  reset(parkAt: ReadonlySet<SeamName>, mutations: ReadonlySet<Mutation>): string[] {
    const left: string[] = [];
    if (this.parked.size > 0) left.push(`parked thread(s) ${[...this.parked.keys()].join(', ')}`);
    if (this.strays > 0) left.push(`${this.strays} seam arrival(s) from a worker of another run`);
    for (const p of [...this.parked.values()]) p.release();
    this.parked.clear();
    this.parkAt = parkAt;
    this.passing.clear();
    this.mutations = mutations;
    this.armed = true;
    this.scheduledWorker = undefined;
    this.strays = 0;
    return left;
  }

  /** Only this worker's seams park from now on (the run's scheduled turn runs on it). */
  schedule(workerId: number): void {
    this.scheduledWorker = workerId;
  }

  workerArrived(
    workerId: number,
    arrival: { readonly name: SeamName; readonly ctx: SeamContext },
    release: (fault?: SeamFault) => void,
  ): void {
    if (!this.armed || !this.parkAt.has(arrival.name)) {
      release();
      return;
    }
    if (this.scheduledWorker !== undefined && workerId !== this.scheduledWorker) {
      this.strays++;
      release();
      return;
    }
    this.arrive(`W${arrival.ctx.generation ?? ''}`, arrival.name, arrival.ctx, release);
  }

  /** Pauses parking (for unscheduled prelude turns); `rearm` resumes it. */
  pause(): void {
    this.armed = false;
  }

  rearm(): void {
    this.armed = true;
  }

  /** The next arrival at `seam` passes without parking (the run's own scheduled send). */
  passNext(seam: SeamName): void {
    if (this.parkAt.has(seam)) this.passing.add(seam);
  }

  /** Stops parking (mutations stay on) and lets every parked thread go. */
  disarm(): void {
    this.armed = false;
    for (const p of [...this.parked.values()]) {
      this.parked.delete(p.thread);
      p.release();
    }
  }

  /** The labels of every parked thread, sorted. */
  enabled(): string[] {
    return [...this.parked.values()].map((p) => p.label).sort();
  }

  isParked(thread: string): boolean {
    return this.parked.has(thread);
  }

  get(thread: string): Parked | undefined {
    return this.parked.get(thread);
  }

  /** Releases a parked thread; it is running again until it parks or finishes. */
  release(thread: string, fault?: SeamFault): Parked {
    const p = this.parked.get(thread);
    if (!p) throw new Error(`thread ${thread} is not parked`);
    this.parked.delete(thread);
    p.release(fault);
    return p;
  }

  /** Forgets a thread that is gone (its worker was terminated while parked). */
  drop(thread: string): void {
    this.parked.delete(thread);
  }

  /** Resolves at the next arrival. */
  nextArrival(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private arrive(
    thread: string,
    seam: SeamName,
    ctx: SeamContext,
    release: (fault?: SeamFault) => void,
  ): void {
    if (this.parked.has(thread)) {
      throw new Error(`thread ${thread} reached ${seam} while parked at ${this.parked.get(thread)!.seam}`);
    }
    this.parked.set(thread, { thread, seam, ctx, label: `${thread}:${seam}`, release });
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }
}
