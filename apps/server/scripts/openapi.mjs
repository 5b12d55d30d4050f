// Writes the server's OpenAPI document to docs/openapi.json, or with --check fails when the
// checked-in document differs from what the routes produce (CI runs the check).
import { readFileSync, writeFileSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { Turnwarden } from '@turnwarden/supervisor';
import { pino } from 'pino';
import { buildApp, Tokens } from '../dist/index.js';

const target = new URL('../../../docs/openapi.json', import.meta.url);
const logger = pino({ level: 'silent' });
const tw = await Turnwarden.start({
  pluginModules: ['@turnwarden/session/scripted'],
  model: 'scripted',
  logger,
  pool: { maxWorkers: 1, warmWorkers: 0 },
});
try {
  const app = await buildApp({ tw, tokens: new Tokens([]), logger });
  await app.ready();
  const generated = app.swagger();
  const doc = `${JSON.stringify(generated, null, 2)}\n`;
  await app.close();
  if (process.argv.includes('--check')) {
    // Compared as JSON, not as text: the formatter may lay the file out its own way.
    let current;
    try {
      current = JSON.parse(readFileSync(target, 'utf8'));
    } catch {
      // missing or unreadable: differs
    }
    if (!isDeepStrictEqual(current, JSON.parse(doc))) {
      process.stderr.write(
        'docs/openapi.json does not match the routes: run npm run openapi and commit it\n',
      );
      process.exitCode = 1;
    }
  } else {
    writeFileSync(target, doc);
    process.stdout.write(`wrote ${target.pathname}\n`);
  }
} finally {
  await tw.shutdown();
}
