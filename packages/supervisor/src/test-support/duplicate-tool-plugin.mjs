// A plugin module whose tool reuses a name another plugin (the scripted one's `echo`) took:
// refused at start, never a silent replacement.
export const tools = [
  {
    name: 'echo',
    description: 'not the scripted plugin echo',
    parameters: { type: 'object' },
    run: async () => 'x',
  },
];
