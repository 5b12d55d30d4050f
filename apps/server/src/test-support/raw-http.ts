/**
 * HTTP/1.1 over a bare `node:net` socket, for the defects that live below fastify's `inject`:
 * the HTTP parser, the router's URL decoding, and what happens to a socket whose request is
 * refused before its body was read. The client writes everything it was given first — as a
 * client that sends a whole request before it reads does — and only then reads the answer.
 */
import { connect } from 'node:net';

interface RawAnswer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly text: string;
  /** The body parsed as JSON (undefined when it is not JSON). */
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, asserted field by field
  readonly body: any;
}

/** The outcome of one exchange: the answer, or how the connection failed (ECONNRESET, EPIPE, …). */
export type RawOutcome = { readonly answer: RawAnswer } | { readonly failed: string };

/** Parses one response from the bytes received so far, or undefined while it is incomplete. */
function parse(buf: Buffer): RawAnswer | undefined {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const [statusLine, ...lines] = buf.subarray(0, end).toString('latin1').split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const length = Number(headers['content-length'] ?? Number.NaN);
  if (!Number.isInteger(length)) throw new Error(`no content-length in ${statusLine}`);
  if (buf.length < end + 4 + length) return undefined;
  const text = buf.subarray(end + 4, end + 4 + length).toString('utf8');
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: Number(statusLine!.split(' ')[1]), headers, text, body };
}

/**
 * Connects, writes `parts` (strings or buffers, in order), waits until all of it has been
 * handed to the kernel, then reads one response. A failure before the whole response arrived —
 * a reset, a broken pipe, the server closing first — is the outcome, not an exception.
 */
export function exchange(port: number, parts: readonly (string | Buffer)[]): Promise<RawOutcome> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let received = Buffer.alloc(0);
    let settled = false;
    const settle = (outcome: RawOutcome) => {
      if (settled) return;
      settled = true;
      socket.destroy();
      resolve(outcome);
    };
    // Nothing is read until the request is written: a reset that arrives meanwhile is seen.
    socket.pause();
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      const answer = parse(received);
      if (answer !== undefined) settle({ answer });
    });
    socket.on('error', (e: NodeJS.ErrnoException) => settle({ failed: e.code ?? e.message }));
    socket.on('close', () => settle({ failed: 'closed before the whole answer' }));
    for (const part of parts) socket.write(part);
    socket.write('', () => socket.resume());
  });
}

/** An oversize body in chunked transfer coding, 16 KiB a chunk. */
export function chunked(bytes: number): Buffer[] {
  const parts: Buffer[] = [];
  for (let at = 0; at < bytes; at += 16_384) {
    const size = Math.min(16_384, bytes - at);
    parts.push(Buffer.from(`${size.toString(16)}\r\n`), Buffer.alloc(size, 'a'), Buffer.from('\r\n'));
  }
  parts.push(Buffer.from('0\r\n\r\n'));
  return parts;
}

/** What an outcome says, in one line a test can compare: `400 INVALID_INPUT body`, or the failure. */
export function summary(outcome: RawOutcome): string {
  if ('failed' in outcome) return outcome.failed;
  const { status, body } = outcome.answer;
  return `${status} ${body?.error?.code ?? `untyped ${outcome.answer.text.slice(0, 60)}`} ${body?.error?.details?.field ?? ''}`.trim();
}
