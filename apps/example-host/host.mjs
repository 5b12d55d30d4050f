// A host application, as a user writes it: it depends on the published packages only (installed
// from their packed tarballs by run.sh), starts the runtime, runs one turn with a tool call, and
// checks what a host relies on. Exits non-zero, saying why, when anything is off.
import { ErrorCode, isTurnwardenError, Turnwarden } from '@turnwarden/supervisor';

const fail = (why) => {
  process.stderr.write(`example host: ${why}\n`);
  process.exit(1);
};

const tw = await Turnwarden.start({
  // The offline scripted model (a turn's script is its message) and its demo tools, opt-in.
  pluginModules: ['@turnwarden/session/scripted'],
  model: 'scripted',
  store: { path: ':memory:' },
  watchdog: { timeoutMs: 5_000, pollMs: 500, graceMs: 1_000 },
  pool: { maxWorkers: 2, warmWorkers: 1 },
});
try {
  // Every call names the tenant and the principal acting for it (T1).
  const caller = { tenantId: 'acme', principal: 'user-1' };
  const { workstreamId } = await tw.createWorkstream(caller);
  const seen = [];
  const stop = await tw.subscribe({ ...caller, workstreamId, listener: (e) => seen.push(e.type) });

  // The built-in scripted model: one tool call, then an answer.
  const content = JSON.stringify({
    script: [{ tools: [{ name: 'echo', args: { text: 'from a tool' } }] }, { text: 'done' }],
  });
  const turn = await tw.send({ ...caller, workstreamId, content });
  const result = await turn.done;
  if (result.status !== 'completed' || result.finalText !== 'done')
    fail(`turn ended ${JSON.stringify(result)}`);

  const { rows } = await tw.history({ ...caller, workstreamId });
  const roles = rows.map((r) => r.message.role).join(',');
  if (roles !== 'user,assistant,tool,assistant') fail(`history is ${roles}`);
  if (!seen.includes('tool_started') || seen.at(-1) !== 'idle') fail(`events were ${seen.join(',')}`);

  // A typed refusal, checked the documented way.
  try {
    await tw.send({ ...caller, workstreamId, content: '   ' });
    fail('whitespace-only content was accepted');
  } catch (e) {
    if (!isTurnwardenError(e, ErrorCode.INVALID_INPUT)) throw e;
  }
  stop();
  process.stdout.write(
    `example host: ok — ${rows.length} rows, ${seen.length} events, status ${result.status}\n`,
  );
} finally {
  // Plain JavaScript on Node 20 has no `await using`; TypeScript compiles it to the same.
  await tw[Symbol.asyncDispose]();
}
