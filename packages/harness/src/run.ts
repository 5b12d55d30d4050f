/**
 * One run of a scenario under one schedule, on a harness runtime (runtime.ts) that many runs
 * share: a fresh workstream, the watchdog polled by the schedule (not a timer), monotonic time
 * and the supervisor's timers moved by the schedule. Threads run one at a time between seams,
 * so the schedule alone decides the interleaving: after every step the run waits until each
 * released thread has parked again or finished.
 */
import { isFenced } from '@turnwarden/clock';
import { type SeamFault, SeamName, workstreamKey } from '@turnwarden/protocol';
import { Mutation } from '@turnwarden/protocol/mutations';
import type { TurnHandle, TurnwardenEvent } from '@turnwarden/supervisor/harness';
import { testControls } from '@turnwarden/supervisor/harness';
import { newRecord, type RunRecord } from './record.js';
import { type HarnessRuntime, PRINCIPAL, RUN_CONFIG, TENANT } from './runtime.js';
import type { Scenario } from './scenario.js';

const SETTLE_TIMEOUT_MS = 5_000;
const SUMMARY_KEY = 'harness:summary';

const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

export class Run {
  turnDone = false;
  committed = false;
  waits = 0;
  private turn: TurnHandle | undefined;
  /** The turn of the host's next message, once it started (S3, C7). */
  private nextDone: Promise<unknown> | undefined;
  /** The host's next message's call, settled (accepted or refused). */
  private nextSettled: Promise<unknown> | undefined;
  private offHandoff: (() => void) | undefined;
  private readonly followerOffs: (() => void)[] = [];
  /** Registrations the schedule started (`follow`), settled before the run is judged. */
  private readonly registering: Promise<void>[] = [];
  private running = new Set<string>();
  private readonly words: Int32Array;
  private unsubscribe: () => void = () => {};

  private constructor(
    readonly scenario: Scenario,
    readonly rt: HarnessRuntime,
    readonly workstreamId: string,
    readonly record: RunRecord,
  ) {
    this.words = new Int32Array(testControls(rt.tw).clockBuffer);
  }

  get tw() {
    return this.rt.tw;
  }

  get harness() {
    return this.rt.harness;
  }

  static async start(scenario: Scenario, mutation: Mutation | undefined, rt: HarnessRuntime): Promise<Run> {
    const record = newRecord();
    const { workstreamId, leaked } = await rt.reset(
      new Set(scenario.park),
      new Set(mutation ? [mutation] : []),
      record.logs,
    );
    record.leaked = leaked;
    const run = new Run(scenario, rt, workstreamId, record);
    const { tw, store, harness } = rt;
    let scheduled: number | undefined;
    run.unsubscribe = await tw.subscribe({
      tenantId: TENANT,
      principal: PRINCIPAL,
      workstreamId,
      listener: (e) => {
        if (e.type === 'turn_started' && e.generation === scheduled) {
          harness.schedule(Number(e.data.workerId));
        }
        if (e.type === 'idle' && e.generation === scheduled && run.record.rewrite !== undefined) {
          // Synchronous read inside the listener: the history at the instant the turn settled.
          void store.readHistory(workstreamKey(TENANT, workstreamId)).then((rows) => {
            run.record.summaryAtIdle = rows.some((r) => r.commitKey === SUMMARY_KEY);
          });
        }
        run.record.events.push(e);
        if (e.type === 'turn_aborted' && run.record.renewalsAtCommit === undefined) {
          run.record.renewalsAtCommit = tw.stats().leaseRenewals;
        }
      },
    });
    if (scenario.prelude) {
      harness.pause();
      for (const content of scenario.prelude) {
        await (await tw.send({ tenantId: TENANT, principal: PRINCIPAL, workstreamId, content })).done;
      }
      harness.rearm();
    }
    const ref = { tenantId: TENANT, principal: PRINCIPAL, workstreamId };
    if (scenario.resume !== undefined) {
      // The prelude's turn waits for an approval: the decision's resumed turn is the scheduled
      // one, under the same generation.
      const status = await tw.status(ref);
      const waiting = status.awaitingApproval;
      if (waiting === undefined) throw new Error('the prelude left no call waiting for approval');
      scheduled = status.generation;
      run.record.decision = scenario.resume;
      run.record.decided = 'pending';
      const deciding =
        scenario.resume === 'approve'
          ? tw.approve({ ...ref, token: waiting.token })
          : tw.deny({ ...ref, token: waiting.token, reason: 'the schedule said no' });
      const resumed = deciding.then(
        (decided) => {
          if (decided.status !== 'resumed') throw new Error('the decision did not resume the turn');
          run.record.decided = 'resumed';
          const turn = decided.turn;
          run.turn = turn;
          run.running.add(`W${turn.generation}`);
          void turn.done.then((result) => {
            run.record.result = result;
            run.turnDone = true;
          });
        },
        (e: unknown) => {
          // Refused (A4: a wait that had ended before the decision reached it): no turn resumes.
          run.record.decided = (e as { code?: string }).code ?? String(e);
          run.turnDone = true;
        },
      );
      // A decision the scenario parks before its admission is the schedule's to release (A4).
      if (!scenario.park.includes(SeamName.decisionToAdmit)) await resumed;
      return run;
    }
    // The scheduled turn's generation is the next one: its turn_started names its worker.
    scheduled = (await tw.status(ref)).generation + 1;
    // The scheduled send itself is not a competing send: it is not held before it enqueues.
    harness.passNext(SeamName.sendCaptureToEnqueue);
    // Nor is its user row's announcement held: the send resolves once the turn has started.
    harness.passNext(SeamName.journalDurableToAnnounce);
    run.turn = await tw.send({
      tenantId: TENANT,
      principal: PRINCIPAL,
      workstreamId,
      content: scenario.script,
    });
    run.running.add(`W${run.turn.generation}`);
    void run.turn.done.then((result) => {
      run.record.result = result;
      run.turnDone = true;
    });
    return run;
  }

  /** The host compacts the prelude (rows 1..2) while the scheduled turn runs. */
  compact(): void {
    const rewrite = { requestedAfterCommit: this.committed, outcome: 'pending' as string };
    this.record.rewrite = rewrite;
    this.tw
      .compact({
        tenantId: TENANT,
        principal: PRINCIPAL,
        workstreamId: this.workstreamId,
        throughSeq: 2,
        summary: 'the earlier exchange',
        commitKey: SUMMARY_KEY,
      })
      .then(
        () => {
          rewrite.outcome = 'ok';
        },
        (e: unknown) => {
          rewrite.outcome = (e as { code?: string }).code ?? String(e);
        },
      );
  }

  /** The host force-cancels the workstream's turn (C3, C7); the call settles when the turn has. */
  cancel(): void {
    const cancel = {
      whileDispatchHeld: this.harness.isParked('D'),
      outcome: 'pending' as 'pending' | boolean | string,
    };
    this.record.cancel = cancel;
    this.tw.cancel({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: this.workstreamId }).then(
      (done) => {
        cancel.outcome = done;
      },
      (e: unknown) => {
        cancel.outcome = (e as { code?: string }).code ?? String(e);
      },
    );
  }

  /** The host closes the workstream: at once (refused while the turn runs) or waiting for the turn (C1). */
  softClose(waiting: boolean): void {
    const settled = this.tw
      .close({
        tenantId: TENANT,
        principal: PRINCIPAL,
        workstreamId: this.workstreamId,
        ...(waiting ? { waitMs: 600_000 } : {}),
      })
      .then(
        () => {
          close.outcome = 'closed';
        },
        (e: unknown) => {
          close.outcome = (e as { code?: string }).code ?? String(e);
        },
      );
    const close = { waiting, outcome: 'pending' as string, settled };
    this.record.close = close;
  }

  /** The approval wait's timeout fires now, as if its time had come (A4). */
  expireApproval(): void {
    this.record.expired = true;
    testControls(this.tw).expireApprovals();
  }

  /**
   * The host sends its next message while the scheduled turn has not ended: it queues behind
   * the turn (S3, C7). Whether a force cancel was already called is noted: the send's claim is
   * captured as it is called, like the cancel's fence.
   */
  sendNext(doubleTexting?: 'interrupt'): void {
    const next: RunRecord['next'] & object = {
      outcome: 'pending',
      beforeCancel: this.record.cancel === undefined,
      eventsAtSend: this.record.events.length,
      ...(doubleTexting === undefined ? {} : { doubleTexting }),
    };
    this.record.next = next;
    this.nextSettled = this.tw
      .send({
        tenantId: TENANT,
        principal: PRINCIPAL,
        workstreamId: this.workstreamId,
        content: 'and next?',
        ...(doubleTexting === undefined ? {} : { doubleTexting }),
      })
      .then(
        (handle) => {
          next.outcome = 'accepted';
          next.generation = handle.generation;
          this.nextDone = handle.done;
        },
        (e: unknown) => {
          next.outcome = (e as { code?: string }).code ?? String(e);
        },
      );
  }

  /**
   * The host deletes the workstream (the incarnation it reads now), creates it again under the
   * same id and runs a turn on it (D4). The successor's turn runs unscheduled: once the delete
   * has resolved the predecessor's turn has settled, and nothing parks any more.
   */
  deleteAndRecreate(): void {
    const ref = { tenantId: TENANT, principal: PRINCIPAL, workstreamId: this.workstreamId };
    const heard: TurnwardenEvent[] = [];
    let deletion!: NonNullable<RunRecord['deletion']>;
    const settled = (async () => {
      const { incarnation } = await this.tw.getWorkstream(ref);
      await this.tw.deleteWorkstream({ ...ref, incarnation });
      this.harness.pause();
      await this.tw.createWorkstream(ref);
      this.followerOffs.push(await this.tw.subscribe({ ...ref, listener: (e) => heard.push(e) }));
      const handle = await this.tw.send({ ...ref, content: 'successor' });
      deletion.successor = await handle.done;
      deletion.outcome = 'ok';
    })().catch((e: unknown) => {
      deletion.outcome = (e as { code?: string }).code ?? String(e);
    });
    deletion = { outcome: 'pending', heard, successor: undefined, settled };
    this.record.deletion = deletion;
  }

  /** A listener registers at a point the schedule picks (D6). */
  follow(late = false): Promise<void> {
    const follower: RunRecord['followers'][number] = { heard: [], late };
    this.record.followers.push(follower);
    const registered = this.tw
      .subscribe({
        tenantId: TENANT,
        principal: PRINCIPAL,
        workstreamId: this.workstreamId,
        listener: (e) => follower.heard.push(e),
      })
      .then(
        (off) => {
          this.followerOffs.push(off);
        },
        (e: unknown) => {
          follower.refused = (e as { code?: string }).code ?? String(e);
        },
      );
    this.registering.push(registered);
    return registered;
  }

  /** The host reads the history and follows the stream from the read's token (E2). */
  readAndFollow(): void {
    const rows: number[] = [];
    const announced: number[] = [];
    const ref = { tenantId: TENANT, principal: PRINCIPAL, workstreamId: this.workstreamId };
    const handoff: NonNullable<RunRecord['handoff']> = {
      rows,
      announced,
      resynced: false,
      outcome: 'pending',
      settled: this.tw
        .history(ref)
        .then(async (read) => {
          rows.push(...read.rows.map((r) => r.seq));
          this.offHandoff = await this.tw.subscribe({
            ...ref,
            handoff: read.handoff,
            listener: (e) => {
              if (e.type === 'message') announced.push(e.data.seq);
              if (e.type === 'history_resync') handoff.resynced = true;
            },
          });
          handoff.outcome = 'ok';
        })
        .catch((e: unknown) => {
          handoff.outcome = (e as { code?: string }).code ?? String(e);
        }),
    };
    this.record.handoff = handoff;
  }

  /** Time moves past the stall bound; one watchdog pass samples the slot. */
  advance(): void {
    this.rt.time.now += RUN_CONFIG.watchdog.timeoutMs + RUN_CONFIG.watchdog.pollMs;
    testControls(this.tw).pollWatchdog();
  }

  /** A renewal period passes: the supervisor's lease renewal runs (if it still should). */
  renewalPeriod(): void {
    this.waits++;
    this.rt.timers.advance(RUN_CONFIG.lease.renewMs);
  }

  /** The grace period passes: an aborted turn that has not unwound loses its worker (L3). */
  gracePeriod(): void {
    this.rt.timers.advance(RUN_CONFIG.watchdog.graceMs);
  }

  /** Takes one scheduled step: an action, or the release of a parked thread. */
  async step(label: string): Promise<void> {
    if (label.startsWith('A:')) {
      const action = this.scenario.actions.find((a) => `A:${a.name}` === label);
      if (!action) throw new Error(`unknown action ${label}`);
      await action.run(this);
      await tick();
      await tick();
      return;
    }
    const thread = label.slice(0, label.indexOf(':'));
    this.releaseThread(thread);
    // A worker runs on until its next seam or the end of its turn. A main-thread continuation
    // runs to completion (or its next seam) within the ticks below.
    if (thread.startsWith('W')) this.running.add(thread);
    await tick();
    await tick();
  }

  private releaseThread(thread: string): void {
    const parked = this.harness.get(thread);
    if (!parked) throw new Error(`thread ${thread} is not parked`);
    const fault: SeamFault | undefined = this.scenario.fault?.(parked);
    if (parked.seam === 'watchdog.sample→commit') {
      const slot = Number(parked.ctx.slot);
      const before = this.version(slot);
      const attempt = {
        sampled: Number(parked.ctx.sampledVersion),
        atRelease: before & 0x7fffffff,
        committed: false,
        fault: fault !== undefined,
      };
      this.record.attempts.push(attempt);
      this.harness.release(thread, fault);
      // The commit runs in the promise continuation: judge it once it has run.
      void tick().then(() => {
        attempt.committed = !isFenced(before) && isFenced(this.version(slot));
        if (attempt.committed) this.committed = true;
      });
      return;
    }
    if (parked.seam === 'journal.admit') this.record.journalReleases.push({ afterCommit: this.committed });
    this.harness.release(thread, fault);
  }

  private version(slot: number): number {
    return Atomics.load(this.words, 16 + slot * 16);
  }

  /** Waits until every released thread has parked again or finished. */
  async quiesce(): Promise<void> {
    const deadline = performance.now() + SETTLE_TIMEOUT_MS;
    for (;;) {
      await tick();
      await tick();
      if (this.turnDone) {
        for (const t of [...this.running]) if (t.startsWith('W')) this.harness.drop(t);
      }
      // A worker waiting on a parked journal request, or a turn end waiting on a parked history
      // rewrite (the engine logs that it waits, synchronously, before it does), is blocked.
      // So is one whose journal acknowledgement waits for its rows' announcement (E2).
      const journalHeld =
        this.harness.isParked('J') ||
        this.harness.isParked('N') ||
        (this.harness.isParked('R') &&
          this.record.logs.some((l) => l.msg === 'turn end waiting for history rewrite in flight'));
      // A worker whose turn's dispatch is held at its seam has not started yet: not busy.
      const dispatchHeld = this.harness.isParked('D');
      const busy = [...this.running].filter(
        (t) =>
          !this.harness.isParked(t) && !(t.startsWith('W') && (this.turnDone || journalHeld || dispatchHeld)),
      );
      // The host's compact reads the workstream's ownership before it is admitted: until it is
      // (parked at its seam under the turn) or has ended, it is still on its way, and the next
      // step waits for it. Otherwise the schedule's "compact, then the turn goes on" held only
      // while the store answered within two loop turns: on PostgreSQL under load the turn ended
      // first and the compact ran after it, judged as a rewrite the turn's end did not wait for.
      if (this.record.rewrite?.outcome === 'pending' && !this.harness.isParked('R') && !this.turnDone) {
        busy.push('C');
      }
      // A decision the schedule released is on its way (A4): until its resumed turn is claimed
      // (or it is refused) the next step waits for it — on a slow store it takes a while.
      if (this.record.decided === 'pending' && !this.harness.isParked('P') && !this.harness.isParked('D')) {
        busy.push('P');
      }
      if (busy.length === 0) {
        // A worker stays in `running` until its turn is done: parked or blocked, it runs again later.
        if (this.turnDone) this.running.clear();
        return;
      }
      if (performance.now() > deadline) {
        this.record.stuck = `thread(s) ${busy.join(', ')} neither parked nor finished within ${SETTLE_TIMEOUT_MS} ms`;
        throw new Stuck(this.record.stuck);
      }
      await Promise.race([
        this.harness.nextArrival(),
        this.turn?.done ?? new Promise(() => undefined),
        new Promise((resolve) => setTimeout(resolve, 2)),
      ]);
    }
  }

  /** After the schedule: let everything run out deterministically until the turn is done. */
  async drain(): Promise<void> {
    for (let i = 0; i < 60 && !this.turnDone; i++) {
      await this.quiesce();
      if (this.turnDone) break;
      const parked = this.harness.enabled();
      if (parked.length > 0) {
        await this.step(parked[0]!);
      } else if (this.committed) {
        this.gracePeriod();
      } else {
        this.advance();
      }
    }
    await this.quiesce();
    if (!this.turnDone) {
      this.record.stuck = 'the turn did not finish while draining';
      throw new Stuck(this.record.stuck);
    }
  }

  /** Reads what the invariants judge, and checks the workstream takes a plain turn again. */
  async collect(): Promise<void> {
    // The host's next message is answered once the scheduled turn has ended (M3: an interrupt's
    // only after its cancel): judged once it has been (bounded).
    if (this.nextSettled !== undefined) {
      this.harness.disarm();
      await Promise.race([
        this.nextSettled,
        new Promise((resolve) => setTimeout(resolve, SETTLE_TIMEOUT_MS)),
      ]);
    }
    if (this.nextDone !== undefined) {
      // The host's next message started its turn after the scheduled one: it runs unscheduled
      // to its end first, so the renewals counted below are the scheduled turn's alone.
      this.harness.disarm();
      await Promise.race([this.nextDone, new Promise((resolve) => setTimeout(resolve, SETTLE_TIMEOUT_MS))]);
    }
    // Renewal periods pass after the turn: a renewal that outlived the commit would show here.
    if (this.committed) {
      this.rt.timers.advance(2 * RUN_CONFIG.lease.renewMs);
      await tick();
    }
    this.record.renewalsAtEnd = this.tw.stats().leaseRenewals;
    // A soft close settles right after the turn: judge it once it has (bounded).
    if (this.record.close !== undefined) {
      await Promise.race([
        this.record.close.settled,
        new Promise((resolve) => setTimeout(resolve, SETTLE_TIMEOUT_MS)),
      ]);
    }
    if (this.record.deletion !== undefined) {
      await Promise.race([
        this.record.deletion.settled,
        new Promise((resolve) => setTimeout(resolve, SETTLE_TIMEOUT_MS)),
      ]);
    }
    if (this.record.handoff !== undefined) {
      await Promise.race([
        this.record.handoff.settled,
        new Promise((resolve) => setTimeout(resolve, SETTLE_TIMEOUT_MS)),
      ]);
    }
    this.record.history = await this.rt.store.readHistory(workstreamKey(TENANT, this.workstreamId));
    // What the handoff listener heard up to here is what the invariant judges.
    this.offHandoff?.();
    // A registration the schedule started is complete before the listeners are judged: with an
    // asynchronous store (PostgreSQL) its ownership read may still be on its way here.
    await Promise.all(this.registering.splice(0));
    // D6: one more listener registers once everything has settled.
    if (this.record.followers.length > 0) await this.follow(true);
    for (const off of this.followerOffs.splice(0)) off();
    // The recovery turn runs unscheduled: nothing parks any more.
    this.harness.disarm();
    // A closed workstream takes no turn: that is the close working, not a failure to recover.
    if (this.record.close?.outcome === 'closed') return;
    try {
      const next = await this.tw.send({
        tenantId: TENANT,
        principal: PRINCIPAL,
        workstreamId: this.workstreamId,
        content: 'are you still there?',
      });
      // C4: the host cancels the scheduled turn's handle late, once its successor runs: the
      // cancel is bound to the ended turn's generation and must leave the successor alone.
      this.record.staleCancel = true;
      void this.turn?.cancel();
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), SETTLE_TIMEOUT_MS);
      });
      const result = await Promise.race([next.done, deadline]);
      clearTimeout(timer);
      this.record.recovered = result?.status === 'completed';
    } catch {
      this.record.recovered = false;
    }
  }

  /** Lets anything still parked go and stops listening; the runtime stays up for the next run. */
  async close(): Promise<void> {
    for (const label of this.harness.enabled()) this.harness.release(label.slice(0, label.indexOf(':')));
    this.unsubscribe();
    if (this.turn !== undefined && !this.turnDone) {
      // A stuck run: force its turn out so the next run starts clean.
      await this.tw
        .cancel({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: this.workstreamId })
        .catch(() => false);
      this.gracePeriod();
    }
  }
}

export class Stuck extends Error {
  override readonly name = 'Stuck';
}

export { Mutation };
