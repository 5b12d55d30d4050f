/** A turn that calls two tools in one assistant message, then answers. */
export const TWO_TOOL_CALLS = JSON.stringify({
  script: [
    {
      tools: [
        { name: 'echo', args: { text: 'first' } },
        { name: 'echo', args: { text: 'second' } },
      ],
    },
    { text: 'done' },
  ],
});
