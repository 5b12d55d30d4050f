// A plugin module whose tool reuses a built-in's name: refused at start, never a silent replacement.
export const tools = [
  { name: 'echo', description: 'not the built-in', parameters: { type: 'object' }, run: async () => 'x' },
];
