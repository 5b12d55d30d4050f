/**
 * The request of an OpenAI-compatible stream on `node:http(s)`, shaped as `fetch` for the AI SDK's
 * request code (`postJsonToApi`: headers, refusals, errors). On the shared model threads `fetch`'s
 * own machinery — undici's body stream, a promise per network read — was about a quarter of the
 * thread's time per token with 500 streams (issue 24's HTTP scale profile); a response read here
 * is a Node stream whose chunks the reader takes as they come (openai-stream.ts).
 *
 * What it answers is what `fetch` would, as far as the SDK reads it:
 * - a 2xx response: `ok`, `status`, `headers`, and the body as a Node stream under `RAW_BODY`
 *   (decompressed as `fetch` would), for the caller's own reader — `body` itself is null;
 * - any other status: a real `Response` with the body read whole, for the SDK's refusal handler;
 * - a connection that fails: the socket's error (ECONNREFUSED, ECONNRESET, …), which the SDK
 *   turns into a retryable `APICallError` ("Cannot connect to API: …") as it does `fetch`'s;
 * - an abort: the signal's `AbortError`, before or after the response began.
 *
 * Connections are kept between requests as `fetch` keeps them: every idle one, however many
 * streams ran at once (Node's global agent keeps 256 and closes the rest: 500 streams ending
 * together then opened 244 connections again for their next step, in the burst where every
 * session's next model call starts). An idle connection closes after `IDLE_MS`, or sooner where
 * the server's `Keep-Alive: timeout` says so.
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { Readable } from 'node:stream';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';

// Node loads `Headers` and `Response` (undici) on their first use: ~30 ms on a quiet machine,
// ~0.1 s on the one model thread in the burst of 500 first requests (its profile, issue 24).
// Loaded with this module instead, when a model thread starts.
new Headers();

/** How long an idle connection is kept (Node's global agent: 5 s; undici's: 4 s). */
const IDLE_MS = 4_000;
const POOL = {
  keepAlive: true,
  scheduling: 'lifo',
  timeout: IDLE_MS,
  maxFreeSockets: Number.POSITIVE_INFINITY,
} as const;
/** The connection pools of every request made here (one per protocol, as `fetch` has one dispatcher). */
const agents = { http: new HttpAgent(POOL), https: new HttpsAgent(POOL) };

/** Where a 2xx answer of `nodeFetch` carries its body. */
export const RAW_BODY = Symbol('turnwarden.rawBody');

export type RawResponse = Response & { readonly [RAW_BODY]?: Readable };

function headerRecord(init: ConstructorParameters<typeof Headers>[0]): Record<string, string> {
  const out: Record<string, string> = {};
  new Headers(init).forEach((v, k) => {
    out[k] = v;
  });
  return out;
}

function decoded(res: IncomingMessage): Readable {
  const encoding = String(res.headers['content-encoding'] ?? '').toLowerCase();
  const unzip =
    encoding === 'gzip' || encoding === 'x-gzip'
      ? createGunzip()
      : encoding === 'deflate'
        ? createInflate()
        : encoding === 'br'
          ? createBrotliDecompress()
          : undefined;
  if (unzip === undefined) return res;
  res.on('error', (e) => unzip.destroy(e));
  // A reader that stops early destroys what it reads: the decompressor. The response under it
  // goes too, or its connection stays open, neither reused nor closed, until the server ends.
  unzip.on('close', () => {
    if (!res.complete) res.destroy();
  });
  return res.pipe(unzip);
}

function read(body: Readable): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    body.on('data', (b: Buffer) => parts.push(b));
    body.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    body.on('error', reject);
  });
}

export function nodeFetch(url: string | URL | Request, init: RequestInit = {}): Promise<Response> {
  const target = new URL(typeof url === 'string' || url instanceof URL ? url : url.url);
  const https = target.protocol === 'https:';
  const send = https ? httpsRequest : httpRequest;
  const agent = https ? agents.https : agents.http;
  const signal = init.signal ?? undefined;
  return new Promise<Response>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const body = typeof init.body === 'string' ? init.body : undefined;
    const req = send(
      target,
      {
        method: init.method ?? 'GET',
        headers: headerRecord(init.headers),
        agent,
        ...(signal ? { signal } : {}),
      },
      (res) => {
        const status = res.statusCode ?? 0;
        const headers = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          if (v !== undefined) headers.set(k, Array.isArray(v) ? v.join(', ') : v);
        }
        const body = decoded(res);
        if (status >= 200 && status < 300) {
          const answer = {
            ok: true,
            status,
            statusText: res.statusMessage ?? '',
            headers,
            body: null,
            url: target.href,
          };
          resolve(Object.assign(answer, { [RAW_BODY]: body }) as unknown as Response);
          return;
        }
        read(body).then(
          (text) =>
            resolve(
              new Response(text, {
                status: status >= 200 && status <= 599 ? status : 500,
                statusText: res.statusMessage ?? '',
                headers,
              }),
            ),
          (e: unknown) => reject(signal?.aborted ? signal.reason : e),
        );
      },
    );
    req.on('error', (err) => {
      reject(signal?.aborted ? signal.reason : err);
    });
    // The whole body in end(): Node sends it with its length, as fetch does, never chunked.
    req.end(body);
  });
}
