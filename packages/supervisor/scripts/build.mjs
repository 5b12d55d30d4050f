/**
 * Builds the supervisor twice from one type-checked program:
 *
 * - `dist/` — what a host runs: every file but the harness-only ones (`src/harness.ts`, the
 *   harness's entry, and `src/mutants.ts`, its deliberately broken variants of the parts). The
 *   build fails if any other file imports `@turnwarden/protocol/mutations`, so a switch cannot
 *   creep back into a part, and if a file of `dist/` reaches the switches.
 * - `dist-harness/` — everything, for the interleaving harness only
 *   (`@turnwarden/supervisor/harness`; not published, see `publishConfig`).
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const MUTATIONS = '@turnwarden/protocol/mutations';

function fail(message) {
  process.stderr.write(`supervisor build: ${message}\n`);
  process.exit(1);
}

const configPath = path.join(root, 'tsconfig.build.json');
const parsed = ts.getParsedCommandLineOfConfigFile(
  configPath,
  {},
  {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => fail(ts.flattenDiagnosticMessageText(d.messageText, '\n')),
  },
);
const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options });
const diagnostics = ts.getPreEmitDiagnostics(program);
if (diagnostics.length > 0) {
  const host = { getCanonicalFileName: (f) => f, getCurrentDirectory: () => root, getNewLine: () => '\n' };
  process.stderr.write(ts.formatDiagnosticsWithColorAndContext(diagnostics, host));
  process.exit(1);
}

/** The harness build's own files: never emitted to dist/. */
const HARNESS_ONLY = new Set(['harness.ts', 'mutants.ts'].map((f) => path.join(root, 'src', f)));
const harnessOnly = (fileName) => HARNESS_ONLY.has(path.resolve(fileName));

for (const file of program.getSourceFiles()) {
  if (file.isDeclarationFile || !file.fileName.startsWith(path.join(root, 'src'))) continue;
  const reaches = file.statements.some(
    (s) => ts.isImportDeclaration(s) && s.moduleSpecifier.text === MUTATIONS,
  );
  if (reaches && !harnessOnly(file.fileName)) {
    fail(
      `${path.relative(root, file.fileName)} imports ${MUTATIONS}: a switch belongs in a variant (src/mutants.ts)`,
    );
  }
}

function emit(outDir, keep) {
  const fromDir = parsed.options.outDir;
  const result = program.emit(undefined, (fileName, text, bom, _onError, sources) => {
    if (sources?.some((s) => !keep(s.fileName))) return;
    ts.sys.writeFile(path.join(outDir, path.relative(fromDir, fileName)), text, bom);
  });
  if (result.emitSkipped) fail(`emit to ${outDir} was skipped`);
}

/** Where `file`'s JavaScript lands in `dist/`. */
const shipped = (file) =>
  path.join(root, 'dist', path.relative(path.join(root, 'src'), file.fileName)).replace(/\.ts$/, '.js');

// An earlier build's harness-only output, if any, goes; then the two builds.
for (const file of HARNESS_ONLY) {
  const base = shipped({ fileName: file }).replace(/\.js$/, '');
  for (const ext of ['.js', '.js.map', '.d.ts', '.d.ts.map']) rmSync(base + ext, { force: true });
}
emit(path.join(root, 'dist'), (fileName) => !harnessOnly(fileName));
emit(path.join(root, 'dist-harness'), () => true);

// The shipped build holds no variant and does not reach the switches at all.
for (const file of program.getSourceFiles()) {
  if (file.isDeclarationFile || !file.fileName.startsWith(path.join(root, 'src'))) continue;
  const js = shipped(file);
  if (harnessOnly(file.fileName)) {
    if (existsSync(js)) fail(`${js}: a harness-only file is in the shipped build`);
    continue;
  }
  const text = readFileSync(js, 'utf8');
  if (text.includes(MUTATIONS) || /\bmutated\(/.test(text)) fail(`${js} reaches the mutation switches`);
}
