/**
 * Bundles the session worker entry (dist/worker.js and everything it imports, xstate and comlink
 * included) into one ES module, dist/worker.bundle.js. A worker that loads one file starts in
 * about the time of an empty worker; resolving and loading the module graph file by file took
 * about twice as long (`turnwarden bench --only spawn`). Plugin modules stay dynamic imports; the
 * opt-in scripted plugin (dist/scripted-plugin.js) is bundled the same way, into
 * dist/scripted-plugin.bundle.js, so a worker that loads it still reads one file.
 */
import { rolldown } from 'rolldown';

for (const name of ['worker', 'model-thread', 'scripted-plugin']) {
  const bundle = await rolldown({
    input: new URL(`../dist/${name}.js`, import.meta.url).pathname,
    platform: 'node',
    treeshake: true,
    logLevel: 'warn',
  });
  try {
    await bundle.write({
      file: new URL(`../dist/${name}.bundle.js`, import.meta.url).pathname,
      format: 'esm',
      sourcemap: true,
    });
  } finally {
    await bundle.close();
  }
}
