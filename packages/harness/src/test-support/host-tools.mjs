// A host's own tool, loaded into every worker through `pluginModules`.
export const tools = [
  {
    name: 'charge_card',
    description: 'Pretends to charge a card; returns a receipt.',
    async run(args) {
      return `receipt for ${Number(args.cents)} cents`;
    },
  },
];
