/**
 * The session worker's entry module has no top-level await: a module whose evaluation is still
 * pending when the supervisor terminates the worker can crash the whole process in V8 (seen once
 * on Node 20: `Check failed: (location_) != nullptr` in `SourceTextModule::ExecuteAsyncModule`).
 * Its start is an ordinary async function (worker.ts).
 */
import { readFileSync } from 'node:fs';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/** `await` expressions of a module's text outside any function: where its evaluation would pend. */
function topLevelAwaits(text: string): string[] {
  const source = ts.createSourceFile('module.ts', text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) || ts.isClassLike(node)) return;
    if (ts.isAwaitExpression(node) || (ts.isForOfStatement(node) && node.awaitModifier !== undefined)) {
      found.push(
        `line ${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${node.getText().slice(0, 60)}`,
      );
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe('the session worker entry', () => {
  it('evaluates without pending: no top-level await (its start is an async function)', () => {
    expect(topLevelAwaits(readFileSync(new URL('./worker.ts', import.meta.url), 'utf8'))).toEqual([]);
  });

  it('the check finds a top-level await where there is one', () => {
    const module = [
      'const f = async () => { await 1; };',
      'await Promise.resolve();',
      'for await (const x of []) f();',
    ].join('\n');
    expect(topLevelAwaits(module)).toEqual([
      'line 2: await Promise.resolve()',
      'line 3: for await (const x of []) f();',
    ]);
  });
});
