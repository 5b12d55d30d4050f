// A host process for the approvals' SIGKILL test: its turn's call needs approval (`echo`); once
// the turn ends waiting, it prints the token on stdout and waits to be killed.
import { Turnwarden } from '@turnwarden/supervisor';
import { pino } from 'pino';

const [dbPath] = process.argv.slice(2);
const tw = await Turnwarden.start({
  pluginModules: ['@turnwarden/session/scripted'],
  model: 'scripted',
  store: { path: dbPath },
  approvals: { tools: ['echo'] },
  watchdog: { timeoutMs: 60_000, pollMs: 1_000, graceMs: 500 },
  pool: { maxWorkers: 1, warmWorkers: 1 },
  logger: pino({ level: 'silent' }),
});
await tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' });
const turn = await tw.send({
  tenantId: 'tenant-a',
  principal: 'user-a',
  workstreamId: 'ws-1',
  content: JSON.stringify({
    script: [{ tools: [{ name: 'echo', args: { text: 'approved after a kill' } }] }, { text: 'resumed' }],
  }),
});
const result = await turn.done;
process.stdout.write(`AWAITING ${result.approval?.token}\n`);
setInterval(() => {}, 1_000);
