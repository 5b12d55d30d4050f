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
