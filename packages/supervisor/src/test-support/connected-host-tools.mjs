// A host tool module that holds a connection from its import until its close() (as an MCP
// server's does): a keep-alive timer. A refused start must close it, or the timer stays.
const keepAlive = setInterval(() => {}, 60_000);

export const tools = [
  {
    name: 'connected_echo',
    description: 'echoes its text over the held connection',
    parameters: { type: 'object', properties: { text: { type: 'string' } } },
    run: async ({ text }) => String(text),
  },
  {
    name: 'host_whoami',
    description: 'the tenant and the workstream of the turn that called it (T2)',
    parameters: { type: 'object', properties: {} },
    run: async (_args, ctx) => JSON.stringify({ tenantId: ctx.tenantId, workstreamId: ctx.workstreamId }),
  },
];

export function close() {
  clearInterval(keepAlive);
}
