// Test-only tools, loaded into every session worker through `pluginModules`.
export const tools = [
  {
    name: 'block',
    description: 'Blocks the worker thread synchronously for `ms`, then returns (a bounded wedge).',
    async run(args) {
      const until = performance.now() + Number(args.ms ?? 0);
      while (performance.now() < until) {}
      return 'unblocked';
    },
  },
  {
    name: 'exit',
    description: 'Exits the worker thread (a crash mid-turn).',
    async run(args) {
      process.exit(Number(args.code ?? 1));
    },
  },
  {
    name: 'allocate',
    description: 'Allocates until the worker runs out of heap.',
    async run() {
      const keep = [];
      for (;;) keep.push(new Array(1_000_000).fill(keep.length));
    },
  },
];

// Moves this worker's wall clock (Date.now) by `ms`: the watchdog must not care (L10).
tools.push({
  name: 'warp_wall_clock',
  description: 'Shifts Date.now in this worker by args.ms (a wall-clock jump).',
  async run(args) {
    const real = Date.now.bind(Date);
    const shift = Number(args.ms ?? 0);
    Date.now = () => real() + shift;
    return `wall clock shifted by ${shift} ms`;
  },
});

// A tool that runs until the test opens its gate (test-support/gate.ts): a test that needs a
// tool to be running while it does something waits on nothing but its own call, never on how
// long a tool happens to take. It says it is waiting once it listens, and heartbeats meanwhile
// (unless args.silent: then the turn's clock is left alone until the gate opens).
tools.push({
  name: 'gated',
  description:
    'Runs until the test opens the gate named args.gate, heartbeating every 20 ms (args.silent: never).',
  async run(args, ctx) {
    const gate = String(args.gate);
    const channel = new BroadcastChannel('turnwarden-test-gates');
    let beat;
    try {
      await new Promise((resolve, reject) => {
        channel.onmessage = (m) => {
          if (m.data?.gate === gate && m.data.open === true) resolve();
        };
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
        if (args.silent !== true) {
          beat = setInterval(() => ctx.heartbeat(), 20);
          ctx.heartbeat();
        }
        channel.postMessage({ gate, waiting: true });
      });
      return `gate ${gate} opened`;
    } finally {
      clearInterval(beat);
      channel.close();
    }
  },
});

// Says which workstream called it, as the tool's context names it (T2: tenant and id).
tools.push({
  name: 'whoami',
  description: 'Returns the tenant and the workstream of the turn that called it.',
  async run(_args, ctx) {
    return JSON.stringify({ tenantId: ctx.tenantId, workstreamId: ctx.workstreamId });
  },
});
