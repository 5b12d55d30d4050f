/**
 * Builds the supervisor twice from one type-checked program:
 *
 * - `dist/` — what a host runs. Every harness mutation switch `mutated(Mutation.x)` is replaced by
 *   `false`, the conditions around it are folded (`a && !false` → `a`, `if (false) …` → nothing,
 *   `false ? a : b` → `b`) and the import of `@turnwarden/protocol/mutations` is dropped, so the
 *   deliberate bugs are not in the shipped code at all. The build fails if a switch survives or
 *   a condition around one cannot be folded.
 * - `dist-harness/` — the same code with the switches, for the interleaving harness only
 *   (`@turnwarden/supervisor/harness`; not published, see `publishConfig`).
 */
import { readFileSync } from 'node:fs';
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

const isBool = (n) => n.kind === ts.SyntaxKind.TrueKeyword || n.kind === ts.SyntaxKind.FalseKeyword;
const isTrue = (n) => n.kind === ts.SyntaxKind.TrueKeyword;

/** `mutated(Mutation.x)` → false, then boolean folding bottom-up; throws where it cannot fold. */
function stripMutations(context) {
  const f = context.factory;
  const bool = (v) => (v ? f.createTrue() : f.createFalse());
  return (sourceFile) => {
    let stripped = 0;
    const where = (node) => {
      const { line } = sourceFile.getLineAndCharacterOfPosition(node.getStart?.(sourceFile) ?? 0);
      return `${path.relative(root, sourceFile.fileName)}:${line + 1}`;
    };
    const fold = (node) => {
      if (
        ts.isCallExpression(node) &&
        ts.isIdentifier(node.expression) &&
        node.expression.text === 'mutated'
      ) {
        stripped++;
        return f.createFalse();
      }
      const visited = ts.visitEachChild(node, fold, context);
      if (ts.isParenthesizedExpression(visited) && isBool(visited.expression)) return visited.expression;
      if (ts.isPrefixUnaryExpression(visited) && visited.operator === ts.SyntaxKind.ExclamationToken) {
        if (isBool(visited.operand)) return bool(!isTrue(visited.operand));
      }
      if (ts.isBinaryExpression(visited)) {
        const { left, right } = visited;
        const op = visited.operatorToken.kind;
        if (op === ts.SyntaxKind.AmpersandAmpersandToken && (isBool(left) || isBool(right))) {
          if (isBool(left)) return isTrue(left) ? right : left;
          if (isTrue(right)) return left;
          throw new Error(`${where(node)}: cannot fold \`… && false\` (the left side may have effects)`);
        }
        if (op === ts.SyntaxKind.BarBarToken && (isBool(left) || isBool(right))) {
          if (isBool(left)) return isTrue(left) ? left : right;
          if (!isTrue(right)) return left;
          throw new Error(`${where(node)}: cannot fold \`… || true\` (the left side may have effects)`);
        }
      }
      if (ts.isConditionalExpression(visited) && isBool(visited.condition)) {
        return isTrue(visited.condition) ? visited.whenTrue : visited.whenFalse;
      }
      if (ts.isIfStatement(visited) && isBool(visited.expression)) {
        if (isTrue(visited.expression)) return visited.thenStatement;
        return visited.elseStatement ?? f.createEmptyStatement();
      }
      return visited;
    };
    const out = ts.visitEachChild(sourceFile, fold, context);
    const uses = sourceFile.statements.some(
      (s) => ts.isImportDeclaration(s) && s.moduleSpecifier.text === MUTATIONS,
    );
    if (uses && stripped === 0)
      throw new Error(`${where(sourceFile)}: imports ${MUTATIONS} but has no switch`);
    return f.updateSourceFile(
      out,
      out.statements.filter((s) => !(ts.isImportDeclaration(s) && s.moduleSpecifier.text === MUTATIONS)),
    );
  };
}

function emit(outDir, transformers) {
  const fromDir = parsed.options.outDir;
  const result = program.emit(
    undefined,
    (fileName, text, bom) => ts.sys.writeFile(path.join(outDir, path.relative(fromDir, fileName)), text, bom),
    undefined,
    false,
    transformers,
  );
  if (result.emitSkipped) fail(`emit to ${outDir} was skipped`);
}

try {
  emit(path.join(root, 'dist'), { before: [stripMutations] });
} catch (e) {
  fail(e.message);
}
emit(path.join(root, 'dist-harness'), undefined);

// The shipped build must not reach the switches at all.
for (const file of program.getSourceFiles()) {
  if (file.isDeclarationFile || !file.fileName.startsWith(path.join(root, 'src'))) continue;
  const js = path
    .join(root, 'dist', path.relative(path.join(root, 'src'), file.fileName))
    .replace(/\.ts$/, '.js');
  const text = readFileSync(js, 'utf8');
  if (text.includes(MUTATIONS) || /\bmutated\(/.test(text)) fail(`${js} still reaches the mutation switches`);
}
