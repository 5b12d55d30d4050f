/** Flags of `turnwarden bench`. */

const SECTION_NAMES = [
  'touch',
  'seams',
  'poll',
  'stall',
  'wedge',
  'activation',
  'spawn',
  'storm',
  'memory',
  'l12',
  'journal',
  'events',
  'history',
  'admission',
  'provider',
  'isolation',
  'mcp',
  'server',
  'postgres',
  'claim',
  'scale',
] as const;
export type SectionName = (typeof SECTION_NAMES)[number];

export interface BenchArgs {
  /** Smaller iteration counts (whole run < 30 s). */
  readonly quick: boolean;
  /** Machine-readable output only (one JSON document on stdout). */
  readonly json: boolean;
  /** Sections to run, in the canonical order. */
  readonly sections: readonly SectionName[];
  readonly help: boolean;
}

export class BenchUsageError extends Error {
  override readonly name = 'BenchUsageError';
}

export const USAGE = `usage: turnwarden bench [--quick] [--json] [--only NAME[,NAME…]]

  --quick         smaller iteration counts and shorter windows
  --json          print one JSON document and nothing else
  --only NAMES    run only these sections (comma-separated): ${SECTION_NAMES.join(', ')}
  --help          this text

Figures are reported side by side with a raw baseline measured in the same run. Timing never
fails the command: each target is only marked met or missed. Exit code 0, 1 if a section
could not run, 2 on bad flags.
`;

function isSection(name: string): name is SectionName {
  return (SECTION_NAMES as readonly string[]).includes(name);
}

function parseOnly(value: string | undefined): SectionName[] {
  if (value === undefined || value.trim() === '') throw new BenchUsageError('--only needs a section name');
  const picked = new Set<SectionName>();
  for (const raw of value.split(',')) {
    const name = raw.trim().toLowerCase();
    if (name === '') continue;
    if (!isSection(name)) {
      throw new BenchUsageError(`unknown section "${raw.trim()}" (known: ${SECTION_NAMES.join(', ')})`);
    }
    picked.add(name);
  }
  if (picked.size === 0) throw new BenchUsageError('--only needs a section name');
  return SECTION_NAMES.filter((n) => picked.has(n));
}

/** Parses the arguments after `bench` (a leading `bench` token is tolerated). */
export function parseBenchArgs(argv: readonly string[]): BenchArgs {
  const args = argv[0] === 'bench' ? argv.slice(1) : [...argv];
  let quick = false;
  let json = false;
  let help = false;
  let only: SectionName[] | undefined;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] ?? '';
    if (arg === '--quick') quick = true;
    else if (arg === '--json') json = true;
    else if (arg === '--help' || arg === '-h') help = true;
    else if (arg === '--only') {
      only = [...(only ?? []), ...parseOnly(args[i + 1])];
      i++;
    } else if (arg.startsWith('--only=')) only = [...(only ?? []), ...parseOnly(arg.slice('--only='.length))];
    else throw new BenchUsageError(`unknown argument "${arg}"`);
  }
  const sections = only === undefined ? [...SECTION_NAMES] : SECTION_NAMES.filter((n) => only.includes(n));
  return { quick, json, sections, help };
}
