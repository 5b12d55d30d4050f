/**
 * The supervisor's pino logger for the demo: a file (default) so the live view stays
 * readable, or stderr through the CLI's output (`--log-stderr`).
 */
import { once } from 'node:events';
import { type Logger, pino } from 'pino';
import type { LogLevel } from '../args.js';
import type { Output } from '../output.js';

export interface DemoLog {
  readonly logger: Logger;
  /** Flushes and closes the destination. */
  close(): Promise<void>;
}

export async function openDemoLog(
  level: LogLevel,
  target: { file: string } | { output: Output },
): Promise<DemoLog> {
  const options = { name: 'turnwarden', level };
  if ('output' in target) {
    const { output } = target;
    return { logger: pino(options, { write: (line: string) => output.err(line) }), close: async () => {} };
  }
  // Asynchronous writes: a log line must never block the watchdog's thread (L12).
  const dest = pino.destination({ dest: target.file, sync: false, mkdir: true, append: false });
  await once(dest, 'ready');
  return {
    logger: pino(options, dest),
    close: async () => {
      const closed = once(dest, 'close');
      dest.end();
      await closed;
    },
  };
}
