// A host process for the restart test: it starts a turn that reaches tool-debt (a tool that
// sleeps), says so on stdout, and waits to be killed.
import { Turnwarden } from '@turnwarden/supervisor';
import { pino } from 'pino';

const [dbPath, ttl = '1000', hostId] = process.argv.slice(2);
const tw = await Turnwarden.start({
  pluginModules: ['@turnwarden/session/scripted'],
  model: 'scripted',
  ...(hostId === undefined ? {} : { hostId }),
  store: { path: dbPath },
  lease: { ttlMs: Number(ttl), renewMs: 200 },
  watchdog: { timeoutMs: 60_000, pollMs: 1_000, graceMs: 500 },
  pool: { maxWorkers: 1, warmWorkers: 1 },
  logger: pino({ level: 'silent' }),
});
await tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' });
await tw.subscribe({
  tenantId: 'tenant-a',
  principal: 'user-a',
  workstreamId: 'ws-1',
  listener: (e) => {
    if (e.type === 'tool_started' && e.data.callIndex === 1) process.stdout.write('IN_TOOL_DEBT\n');
  },
});
await tw.send({
  tenantId: 'tenant-a',
  principal: 'user-a',
  workstreamId: 'ws-1',
  content: JSON.stringify({
    script: [
      {
        tools: [
          { name: 'echo', args: { text: 'done before' } },
          { name: 'sleep', args: { ms: 600_000 } },
        ],
      },
    ],
  }),
});
setInterval(() => {}, 1_000);
