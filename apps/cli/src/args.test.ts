import { describe, expect, it } from 'vitest';
import { parseCommand, UsageError } from './args.js';
import { runCli } from './cli.js';
import { memoryOutput } from './output.js';

describe('command line', () => {
  it('parses demo flags with defaults', () => {
    const cmd = parseCommand(['demo', '--workstreams', '5', '--json', '--db', ':memory:']);
    expect(cmd).toMatchObject({
      name: 'demo',
      args: {
        workstreams: 5,
        turns: 4,
        seed: 1,
        json: true,
        db: ':memory:',
        timeoutMs: 1000,
        pollMs: 100,
        graceMs: 500,
      },
    });
  });

  it.each([
    [['frobnicate']],
    [['--frob']],
    [['demo', '--frob']],
    [['demo', '--turns', 'x']],
    [['demo', '--turns', '0']],
    [['demo', 'extra']],
    [['demo', '--log-level', 'loud']],
    [['demo', '--poll-ms', '2000']],
    [['help', 'nope']],
    [['demo', '--provider', 'gpt']],
    [['demo', '--base-url', 'http://localhost:11434/v1']],
    [['demo', '--provider', 'openai-compatible', '--base-url', 'ftp://x']],
    [['demo', '--provider', 'openai-compatible', '--base-url', 'http://localhost:11434/v1']],
    [['demo', '--provider', 'openai-compatible', '--api-key-env', 'not a var']],
  ])('refuses %j with a usage error', (argv) => {
    expect(() => parseCommand(argv)).toThrow(UsageError);
  });

  it('parses the model flags: scripted by default; openai-compatible with a loopback server or a real one', () => {
    expect(parseCommand(['demo'])).toMatchObject({ args: { provider: 'scripted', baseUrl: undefined } });
    expect(parseCommand(['demo', '--provider', 'openai-compatible'])).toMatchObject({
      args: { provider: 'openai-compatible', baseUrl: undefined, model: undefined },
    });
    expect(
      parseCommand([
        'demo',
        '--provider=openai-compatible',
        '--base-url=http://localhost:11434/v1',
        '--model=llama3.1',
        '--api-key-env=OLLAMA_KEY',
      ]),
    ).toMatchObject({
      args: { baseUrl: 'http://localhost:11434/v1', model: 'llama3.1', apiKeyEnv: 'OLLAMA_KEY' },
    });
  });

  it('hands bench its own arguments', () => {
    expect(parseCommand(['bench', '--whatever', 'x'])).toEqual({ name: 'bench', argv: ['--whatever', 'x'] });
  });

  it('hands scale its own arguments, and has help for it', () => {
    expect(parseCommand(['scale', '--n', '250,500'])).toEqual({ name: 'scale', argv: ['--n', '250,500'] });
    expect(parseCommand(['help', 'scale'])).toEqual({ name: 'help', topic: 'scale' });
  });

  it('exits 2 with a message on stderr for an unknown command or flag', async () => {
    for (const argv of [['nope'], ['demo', '--nope']]) {
      const out = memoryOutput();
      expect(await runCli(argv, out)).toBe(2);
      expect(out.stdout).toEqual([]);
      expect(out.stderr.join('')).toMatch(/^turnwarden: .*unknown/i);
    }
  });

  it('prints help', async () => {
    for (const argv of [[], ['help'], ['--help'], ['help', 'demo'], ['demo', '--help']]) {
      const out = memoryOutput();
      expect(await runCli(argv, out)).toBe(0);
      expect(out.stdout.join('')).toMatch(/Usage:/);
    }
  });
});
