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
