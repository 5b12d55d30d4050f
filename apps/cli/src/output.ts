/**
 * The CLI's only door to the terminal: everything the command prints goes through an
 * `Output`, so library code never touches the console and tests capture what was printed.
 */

export interface Output {
  /** True when stdout is an interactive terminal (live view, colours). */
  readonly isTTY: boolean;
  /** Terminal width and height, when known. */
  readonly columns: number;
  readonly rows: number;
  /** Whether ANSI colours may be used on stdout. */
  readonly color: boolean;
  out(text: string): void;
  err(text: string): void;
}

/** The process's stdout and stderr. */
export function processOutput(): Output {
  const stdout = process.stdout;
  const isTTY = stdout.isTTY === true;
  return {
    isTTY,
    get columns() {
      return stdout.columns ?? 80;
    },
    get rows() {
      return stdout.rows ?? 24;
    },
    color: isTTY && process.env.NO_COLOR === undefined && process.env.TERM !== 'dumb',
    out: (text) => {
      stdout.write(text);
    },
    err: (text) => {
      process.stderr.write(text);
    },
  };
}

export interface MemoryOutput extends Output {
  readonly stdout: string[];
  readonly stderr: string[];
}

/** An output that records what was printed (tests, embedding). */
export function memoryOutput(
  options: { isTTY?: boolean; columns?: number; rows?: number } = {},
): MemoryOutput {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return {
    isTTY: options.isTTY ?? false,
    columns: options.columns ?? 100,
    rows: options.rows ?? 40,
    color: false,
    stdout,
    stderr,
    out: (text) => {
      stdout.push(text);
    },
    err: (text) => {
      stderr.push(text);
    },
  };
}

/** ANSI styling that degrades to plain text when colours are off. */
export function styler(color: boolean) {
  const wrap = (code: string) => (text: string) => (color ? `\x1b[${code}m${text}\x1b[0m` : text);
  return {
    bold: wrap('1'),
    dim: wrap('2'),
    red: wrap('31'),
    green: wrap('32'),
    yellow: wrap('33'),
    cyan: wrap('36'),
  };
}
export type Styler = ReturnType<typeof styler>;

// ── terminal control (the live view) ────────────────────────────────────────
const ESC = '\u001b';
export const HIDE_CURSOR = `${ESC}[?25l`;
export const SHOW_CURSOR = `${ESC}[?25h`;
export const CLEAR_LINE = `${ESC}[2K`;
export const CLEAR_BELOW = `${ESC}[J`;
/** Moves the cursor to the start of the line `n` lines up. */
export const cursorUp = (n: number) => `${ESC}[${n}F`;
/** Escape sequences, or runs of visible text. */
const TOKENS = new RegExp(`${ESC}\\[[0-9;?]*[A-Za-z]|[^${ESC}]+`, 'gu');
const SEQUENCES = new RegExp(`${ESC}\\[[0-9;?]*[A-Za-z]`, 'gu');

/** The text without its escape sequences. */
export function stripAnsi(text: string): string {
  return text.replace(SEQUENCES, '');
}

/** Cuts a line to `width` visible characters, keeping (and closing) its styles. */
export function fit(line: string, width: number): string {
  let visible = 0;
  let out = '';
  for (const m of line.matchAll(TOKENS)) {
    const part = m[0];
    if (part.startsWith(ESC)) {
      out += part;
      continue;
    }
    const chars = [...part];
    if (visible + chars.length > width) {
      const cut = `${out}${chars.slice(0, Math.max(0, width - visible - 1)).join('')}…`;
      return out.includes(ESC) ? `${cut}${ESC}[0m` : cut;
    }
    out += part;
    visible += chars.length;
  }
  return out;
}
