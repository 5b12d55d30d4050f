// A plugin module that provides a model by name (never streamed by the tests that load it).
export const models = [
  {
    name: 'tiny',
    async *stream() {
      yield { type: 'text', text: 'hi' };
    },
  },
];
