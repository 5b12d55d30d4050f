/**
 * The demo's workload: a deterministic plan (same options and seed → same plan) of scripted
 * turns for every workstream. Each turn has a kind and the outcome that kind must have:
 *
 * - normal    — a streamed answer (text chunks with delays)                → completed
 * - tools     — tool calls, several per message, duplicate ids (echo/sleep) → completed
 * - heartbeat — a tool that heartbeats for ≈ 2.5 × timeoutMs (L2)          → completed
 * - stall     — a promise that ignores the abort signal (L1)               → interrupted
 * - wedge     — a synchronous infinite loop in a tool (L3)                 → interrupted, worker terminated
 * - cancel    — the host force-cancels while a tool runs (C3)              → interrupted (cancel), results synthesized
 * - store-fault  — the store fails a tool row transiently, loses its ack, or is slow (P1, P3)
 *                                                                           → completed (the journal retries)
 * - store-reject — the store refuses a tool row (S5)                       → failed; repaired before the next turn
 * - approval  — a `transfer` call that needs a person's approval (A1–A4): the turn ends waiting;
 *               the driver approves, denies, or lets the wait time out       → decided
 * - double-text — while the turn's long tool runs, the user sends again with a double-texting
 *               policy (M1–M4): reject, enqueue, interrupt or rollback         → double-texted
 *
 * Store faults are injected by the demo's store (`faultyStore`) for the row carrying the turn's
 * marker (an echo of `⚑<fault>:<workstream>#<turn>`), so each fault hits exactly its turn.
 */
import { rng } from '@turnwarden/harness';

export const TURN_KINDS = [
  'normal',
  'tools',
  'heartbeat',
  'stall',
  'wedge',
  'cancel',
  'store-fault',
  'store-reject',
  'approval',
  'double-text',
] as const;
export type TurnKind = (typeof TURN_KINDS)[number];

export type Expectation =
  | 'completed'
  | 'interrupted'
  | 'terminated'
  | 'force-cancelled'
  | 'failed'
  /** The turn waited for an approval and was decided: completed after approve or deny, or denied by its timeout. */
  | 'decided'
  /**
   * A second message met the running turn (M1–M4): reject refused it, enqueue ran it after the
   * turn, interrupt and rollback ended the turn (unless it had just finished) and ran it.
   */
  | 'double-texted';

export const EXPECTED: Readonly<Record<TurnKind, Expectation>> = {
  normal: 'completed',
  tools: 'completed',
  heartbeat: 'completed',
  stall: 'interrupted',
  wedge: 'terminated',
  cancel: 'force-cancelled',
  'store-fault': 'completed',
  'store-reject': 'failed',
  approval: 'decided',
  'double-text': 'double-texted',
};

/** Share of each kind in the plan (normal takes the rest); each appears at least once. */
const SHARE: Readonly<Record<Exclude<TurnKind, 'normal'>, number>> = {
  tools: 0.16,
  heartbeat: 0.12,
  stall: 0.12,
  wedge: 0.08,
  cancel: 0.08,
  'store-fault': 0.1,
  'store-reject': 0.05,
  approval: 0.08,
  'double-text': 0.08,
};

/** A store fault the demo injects for one turn: the row that carries `marker` gets it. */
interface PlannedFault {
  readonly marker: string;
  readonly fault: 'reject' | 'transient' | 'lose-ack' | { readonly delayMs: number };
  /** How many times (a transient failure twice: the journal retries both). */
  readonly times: number;
}

export interface TurnPlan {
  /** 1-based position in its workstream. */
  readonly index: number;
  readonly kind: TurnKind;
  /** Which script shape of the kind (`model`, `tool`, `dup-ids` …). */
  readonly variant: string;
  /** The user message: a scripted-model script (JSON). */
  readonly content: string;
  /** The store fault this turn meets (store-fault and store-reject turns). */
  readonly fault?: PlannedFault;
  /** A double-text turn: the second message, sent with the policy its variant names while the turn runs. */
  readonly followUp?: string;
}

export interface WorkstreamPlan {
  readonly id: string;
  readonly turns: readonly TurnPlan[];
  /** A plain message sent after the last turn: the workstream must be idle and complete it. */
  readonly idleCheck: string;
}

export interface WorkloadOptions {
  readonly workstreams: number;
  readonly turns: number;
  readonly seed: number;
  /** The watchdog timeout the scripts are scaled to. */
  readonly timeoutMs: number;
  /** False: no store-fault or store-reject turns (a remote server's store cannot be faulted). */
  readonly storeFaults?: boolean;
  /** Prepended to every workstream id. */
  readonly idPrefix?: string;
  /** False: no approval turns (a driver that does not decide them: the remote and hosts demos). */
  readonly approvals?: boolean;
  /** False: no double-text turns (a driver that does not double-text: the remote and hosts demos). */
  readonly doubleTexts?: boolean;
}

export interface WorkloadPlan {
  readonly seed: number;
  readonly workstreams: readonly WorkstreamPlan[];
  readonly counts: Readonly<Record<TurnKind, number>>;
}

type Rand = () => number;
const between = (rand: Rand, lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
const pick = <T>(rand: Rand, items: readonly T[]): T => items[Math.floor(rand() * items.length)] as T;

function workstreamId(i: number, total: number): string {
  return `ws-${String(i + 1).padStart(Math.max(2, String(total).length), '0')}`;
}

/** How many turns of each kind a plan of `total` turns has. */
export function kindCounts(
  total: number,
  storeFaults = true,
  approvals = true,
  doubleTexts = true,
): Record<TurnKind, number> {
  const counts = Object.fromEntries(TURN_KINDS.map((k) => [k, 0])) as Record<TurnKind, number>;
  if (!doubleTexts) {
    const withThem = kindCounts(total, storeFaults, approvals);
    return { ...withThem, normal: withThem.normal + withThem['double-text'], 'double-text': 0 };
  }
  if (!approvals) {
    const withThem = kindCounts(total, storeFaults);
    return { ...withThem, normal: withThem.normal + withThem.approval, approval: 0 };
  }
  if (!storeFaults) {
    const withFaults = kindCounts(total);
    counts.normal = withFaults.normal + withFaults['store-fault'] + withFaults['store-reject'];
    for (const kind of TURN_KINDS) {
      if (kind !== 'normal' && kind !== 'store-fault' && kind !== 'store-reject')
        counts[kind] = withFaults[kind];
    }
    return counts;
  }
  if (total < TURN_KINDS.length) {
    // Too few turns for every kind: the recovery kinds first, they are the point of the demo.
    const order: TurnKind[] = [
      'stall',
      'heartbeat',
      'wedge',
      'cancel',
      'store-reject',
      'store-fault',
      'tools',
      'approval',
      'double-text',
    ];
    for (const kind of order.slice(0, total)) counts[kind] = 1;
    return counts;
  }
  let rest = total;
  for (const [kind, share] of Object.entries(SHARE) as [Exclude<TurnKind, 'normal'>, number][]) {
    counts[kind] = Math.max(1, Math.round(share * total));
    rest -= counts[kind];
  }
  counts.normal = rest;
  return counts;
}

export function planWorkload(options: WorkloadOptions): WorkloadPlan {
  const { workstreams, turns, seed, timeoutMs } = options;
  // The harness's seeded PRNG (mulberry32): the plan is deterministic for a seed; never Math.random.
  const rand = rng(seed);
  const counts = kindCounts(
    workstreams * turns,
    options.storeFaults !== false,
    options.approvals !== false,
    options.doubleTexts !== false,
  );
  const kinds: TurnKind[] = TURN_KINDS.flatMap((k) => Array.from({ length: counts[k] }, () => k));
  for (let i = kinds.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [kinds[i], kinds[j]] = [kinds[j] as TurnKind, kinds[i] as TurnKind];
  }
  const plans: WorkstreamPlan[] = [];
  for (let w = 0; w < workstreams; w++) {
    const id = `${options.idPrefix ?? ''}${workstreamId(w, workstreams)}`;
    const turnPlans: TurnPlan[] = [];
    for (let t = 0; t < turns; t++) {
      const kind = kinds[w * turns + t] as TurnKind;
      turnPlans.push({
        index: t + 1,
        kind,
        ...script(kind, rand, timeoutMs, `${id}#${t + 1}`),
      });
    }
    plans.push({ id, turns: turnPlans, idleCheck: `${id}: are you idle again?` });
  }
  return { seed, workstreams: plans, counts };
}

const SENTENCES = [
  'The watchdog samples every slot of the activity clock.',
  'A lease with a fencing token keeps two writers apart.',
  'Every tool call occurrence gets exactly one result.',
  'Idle sessions hold no thread; their state is durable.',
  'Progress is a stamp on a SharedArrayBuffer, nothing more.',
  'A wedged worker is terminated once its grace period runs out.',
  'Streaming tokens count as progress for the watchdog.',
];

type Step = Record<string, unknown>;

function script(
  kind: TurnKind,
  rand: Rand,
  timeoutMs: number,
  tag: string,
): { variant: string; content: string; fault?: PlannedFault; followUp?: string } {
  // Every silence in a turn that must complete stays far below the timeout.
  const gap = (lo: number, hi: number) => Math.min(between(rand, lo, hi), Math.floor(timeoutMs / 5));
  const text = (): Step => ({
    text: pick(rand, SENTENCES),
    chunks: between(rand, 4, 10),
    delayMs: gap(20, 70),
  });
  let variant: string;
  let steps: Step[];
  const planned: { fault?: PlannedFault; followUp?: string } = {};
  /** A tool row carrying the fault's marker, then a streamed answer. */
  const faulted = (f: PlannedFault['fault'], times: number, name: string): Step[] => {
    const marker = `⚑${name}:${tag}`;
    planned.fault = { marker, fault: f, times };
    return [{ tools: [{ name: 'echo', args: { text: marker } }] }, text()];
  };
  switch (kind) {
    case 'normal':
      variant = rand() < 0.7 ? 'short' : 'long';
      steps = variant === 'short' ? [text()] : [text(), text()];
      break;
    case 'tools': {
      variant = pick(rand, ['dup-ids', 'two-rounds', 'bad-args']);
      const sleep = { name: 'sleep', args: { ms: gap(50, 200) } };
      if (variant === 'dup-ids') {
        steps = [
          text(),
          {
            tools: [
              { name: 'echo', args: { text: 'first' }, id: 'dup' },
              { name: 'echo', args: { text: 'second' }, id: 'dup' },
              sleep,
            ],
          },
          text(),
        ];
      } else if (variant === 'two-rounds') {
        steps = [
          { tools: [{ name: 'echo', args: { text: 'round one' }, id: 'r' }, sleep] },
          { text: 'One more look.' },
          { tools: [{ name: 'echo', args: { text: 'round two' }, id: 'r' }] },
          text(),
        ];
      } else {
        // Malformed arguments become an error result (effect none); the turn goes on (T6).
        steps = [
          {
            tools: [
              { name: 'echo', args: '{"text": ' },
              { name: 'echo', args: { text: 'fine' } },
            ],
          },
          text(),
        ];
      }
      break;
    }
    case 'heartbeat': {
      variant = rand() < 0.75 ? 'tool' : 'model';
      const ms = Math.round(2.5 * timeoutMs);
      const everyMs = Math.max(10, Math.min(50, Math.round(timeoutMs / 20)));
      steps =
        variant === 'tool'
          ? [
              { text: 'Starting the long job.' },
              { tools: [{ name: 'heartbeat', args: { ms, everyMs } }] },
              text(),
            ]
          : [{ text: 'Thinking hard.' }, { heartbeat: ms, everyMs }, text()];
      break;
    }
    case 'stall':
      variant = rand() < 0.5 ? 'model' : 'tool';
      steps =
        variant === 'model'
          ? [{ text: 'Thinking about it…' }, { stall: true }]
          : [
              // echo runs (applied), sleep stalls (synthesized: unknown), the last echo never starts (none).
              {
                tools: [
                  { name: 'echo', args: { text: 'before the stall' } },
                  { name: 'sleep', args: { ms: 600_000, ignoreAbort: true } },
                  { name: 'echo', args: { text: 'never runs' } },
                ],
              },
            ];
      break;
    case 'cancel':
      // The host force-cancels once the sleep started: echo applied, sleep unknown, the last echo none.
      variant = 'mid-tool';
      steps = [
        { text: 'Fetching the data.' },
        {
          tools: [
            { name: 'echo', args: { text: 'before the cancel' } },
            { name: 'sleep', args: { ms: 600_000 } },
            { name: 'echo', args: { text: 'never runs' } },
          ],
        },
      ];
      break;
    case 'store-fault':
      variant = pick(rand, ['transient', 'lost-ack', 'slow']);
      steps =
        variant === 'transient'
          ? faulted('transient', 2, 'busy')
          : variant === 'lost-ack'
            ? faulted('lose-ack', 1, 'lost-ack')
            : faulted({ delayMs: gap(50, 150) }, 1, 'slow');
      break;
    case 'store-reject':
      variant = 'tool-row';
      steps = faulted('reject', 1, 'reject');
      break;
    case 'approval':
      // The driver approves, denies, or lets the wait run out (approvals.timeoutMs): every way
      // the call gets one result and the turn goes on, or ends, with a valid history.
      variant = pick(rand, ['approve', 'deny', 'timeout']);
      steps = [
        { text: 'I will pay the invoice.' },
        { tools: [{ name: 'transfer', args: { to: `acct-${tag}`, amount: between(rand, 10, 500) } }] },
        text(),
      ];
      break;
    case 'double-text': {
      // The turn runs a long tool (heartbeating: it is not stalled) while the user sends again
      // with the variant's policy; the second message is a short answer of its own.
      variant = pick(rand, ['reject', 'enqueue', 'interrupt', 'rollback']);
      const ms = Math.round(1.5 * timeoutMs);
      const everyMs = Math.max(10, Math.min(50, Math.round(timeoutMs / 20)));
      steps = [
        { text: 'Working on the long job.' },
        { tools: [{ name: 'heartbeat', args: { ms, everyMs } }] },
        text(),
      ];
      planned.followUp = JSON.stringify({ script: [text()] });
      break;
    }
    case 'wedge':
      // A wedge is the turn's own thread's: a tool that spins in its session worker. A model step
      // that spins would wedge a shared model thread (the default model placement) — every call
      // on it — or, over HTTP, cannot wedge the client at all. (The draw keeps the plan's seed.)
      rand();
      variant = 'tool';
      steps =
        variant === 'model'
          ? [{ text: 'About to wedge.' }, { wedge: true }]
          : [
              {
                tools: [
                  { name: 'echo', args: { text: 'before the wedge' } },
                  { name: 'wedge', args: {} },
                ],
              },
            ];
      break;
  }
  const content = JSON.stringify({ script: steps });
  return {
    variant,
    content,
    ...(planned.fault === undefined ? {} : { fault: planned.fault }),
    ...(planned.followUp === undefined ? {} : { followUp: planned.followUp }),
  };
}

const PROMPTS = [
  'In one sentence, what does a watchdog do in a server?',
  'Name three things that can make a network request hang.',
  'Say hello in exactly five words.',
  'What is a fencing token, in two sentences?',
];

/**
 * A conversation for a real model server: plain prompts, some asking for the echo tool; every
 * turn is expected to complete. Kinds are `normal` and `tools`; the plan shape is the same.
 */
export function planConversation(
  options: Pick<WorkloadOptions, 'workstreams' | 'turns' | 'seed'>,
): WorkloadPlan {
  const rand = rng(options.seed);
  const counts = Object.fromEntries(TURN_KINDS.map((k) => [k, 0])) as Record<TurnKind, number>;
  const plans: WorkstreamPlan[] = [];
  for (let w = 0; w < options.workstreams; w++) {
    const id = workstreamId(w, options.workstreams);
    const turns: TurnPlan[] = [];
    for (let t = 0; t < options.turns; t++) {
      const tool = rand() < 0.4;
      counts[tool ? 'tools' : 'normal']++;
      turns.push({
        index: t + 1,
        kind: tool ? 'tools' : 'normal',
        variant: tool ? 'echo' : 'prompt',
        content: tool
          ? `Call the echo tool with the text "${id} turn ${t + 1}", then tell me in one sentence what it returned.`
          : pick(rand, PROMPTS),
      });
    }
    plans.push({ id, turns, idleCheck: `${id}: reply with the single word "idle".` });
  }
  return { seed: options.seed, workstreams: plans, counts };
}
