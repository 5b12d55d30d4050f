/** Command dispatch: parses the command line and runs the command; returns the exit code. */
import { readFileSync } from 'node:fs';
import { type Command, parseCommand, UsageError } from './args.js';
import { demoCommand } from './demo/command.js';
import type { Output } from './output.js';
import { DEMO_USAGE, MAIN_USAGE } from './usage.js';

const EXIT_USAGE = 2;

function version(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      version?: string;
    };
    return pkg.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** Loaded on demand: the bench is its own module with its own flags. */
async function runBench(argv: readonly string[]): Promise<number> {
  const bench = await import('./bench/index.js');
  return bench.runBench([...argv]);
}

/** Loaded on demand, like the bench. */
async function runScale(argv: readonly string[]): Promise<number> {
  const scale = await import('./scale/index.js');
  return scale.runScaleCommand([...argv]);
}

/** Loaded on demand: the server and its dependencies only when serving. */
async function runServe(argv: readonly string[], output: Output): Promise<number> {
  const serve = await import('./serve/index.js');
  return serve.serveCommand(argv, output);
}

/** Loaded on demand, like the bench. */
async function runStress(argv: readonly string[], output: Output): Promise<number> {
  const stress = await import('./stress/index.js');
  return stress.runStress(argv, output);
}

async function run(command: Command, output: Output): Promise<number> {
  switch (command.name) {
    case 'help':
      // The bench owns its flags and its help.
      if (command.topic === 'bench') return runBench(['--help']);
      if (command.topic === 'scale') return runScale(['--help']);
      if (command.topic === 'stress') return runStress(['--help'], output);
      if (command.topic === 'serve') return runServe(['--help'], output);
      output.out(command.topic === 'demo' ? DEMO_USAGE : MAIN_USAGE);
      return 0;
    case 'version':
      output.out(`turnwarden ${version()}\n`);
      return 0;
    case 'demo':
      return demoCommand(command.args, output);
    case 'bench':
      return runBench(command.argv);
    case 'scale':
      return runScale(command.argv);
    case 'stress':
      return runStress(command.argv, output);
    case 'serve':
      return runServe(command.argv, output);
  }
}

export async function runCli(argv: readonly string[], output: Output): Promise<number> {
  try {
    return await run(parseCommand(argv), output);
  } catch (e) {
    if (e instanceof UsageError) {
      output.err(`turnwarden: ${e.message}\nRun 'turnwarden help' for usage.\n`);
      return EXIT_USAGE;
    }
    const message = e instanceof Error ? (e.stack ?? e.message) : String(e);
    output.err(`turnwarden: error: ${message}\n`);
    return 1;
  }
}
