/**
 * Errors over HTTP: every refusal is `{ error: { code, message, retryable, details? } }` with the
 * status its code calls for. Another tenant's workstream is 404, exactly as one that does not
 * exist (T2). Over capacity is 429 with `Retry-After` (T4). Bad bodies, unknown fields and
 * oversize bodies are 400 `INVALID_INPUT` naming the field, and nothing is written (T5).
 *
 * That holds for the refusals fastify and node make themselves too: a path the router cannot
 * decode or whose id is too long (`refuseUnrouted`), and a request the HTTP parser cannot read —
 * malformed, headers too large, too slow (`refuseMalformed`).
 */
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import {
  ERROR_TABLE,
  ErrorCode,
  ID_RULE,
  isTurnwardenError,
  type TurnwardenError,
} from '@turnwarden/protocol';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';

/** The codes only the HTTP layer answers with (the runtime's are `ErrorCode`). */
export const HttpCode = {
  /** No bearer token, or one that names no tenant (T1). */
  UNAUTHORIZED: 'UNAUTHORIZED',
  /** No such route, or no such console asset. */
  NOT_FOUND: 'NOT_FOUND',
} as const;

/** Every code an error body can carry: the OpenAPI document's enum. */
export const ERROR_CODES = [...Object.values(ErrorCode), ...Object.values(HttpCode)] as [string, ...string[]];

export interface ErrorBody {
  readonly error: {
    readonly code: string;
    readonly message: string;
    readonly retryable: boolean;
    readonly details?: Record<string, unknown>;
  };
}

export function errorBody(
  code: string,
  message: string,
  retryable: boolean,
  details?: Record<string, unknown>,
): ErrorBody {
  return { error: { code, message, retryable, ...(details === undefined ? {} : { details }) } };
}

function sendTyped(reply: FastifyReply, e: TurnwardenError): FastifyReply {
  // The status is the error table's (packages/protocol/src/error-codes.ts).
  const status = ERROR_TABLE[e.code].status;
  const retryAfterMs = e.details?.retryAfterMs;
  // Over capacity always says when to retry (T4); any other refusal that knows — a lease held
  // elsewhere until it expires — says it too.
  if (status === 429 || (typeof retryAfterMs === 'number' && e.retryable)) {
    const seconds = typeof retryAfterMs === 'number' ? Math.max(1, Math.ceil(retryAfterMs / 1000)) : 1;
    reply.header('retry-after', String(seconds));
  }
  return reply.code(status).send(errorBody(e.code, e.message, e.retryable, e.details));
}

/** Fastify's error handler for the API. */
export function handleError(
  err: FastifyError | Error,
  request: FastifyRequest,
  reply: FastifyReply,
): FastifyReply {
  if (isTurnwardenError(err)) return sendTyped(reply, err);
  if (hasZodFastifySchemaValidationErrors(err)) {
    const issue = err.validation[0];
    const path = issue?.instancePath?.replace(/^\//, '').replaceAll('/', '.') ?? '';
    // An unknown field (zod's unrecognized_keys) is named by its key.
    const unknown = (issue?.params as { keys?: string[] } | undefined)?.keys?.[0];
    const field = unknown ?? (path === '' ? (err.validationContext ?? 'body') : path);
    return reply
      .code(400)
      .send(
        errorBody(
          ErrorCode.INVALID_INPUT,
          `${err.validationContext ?? 'request'}: ${issue?.message ?? 'invalid'}`,
          false,
          { field },
        ),
      );
  }
  const code = (err as FastifyError).code;
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return reply
      .code(400)
      .send(errorBody(ErrorCode.INVALID_INPUT, 'the request body is too large', false, { field: 'body' }));
  }
  if (
    code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' ||
    code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ||
    (err as FastifyError).statusCode === 400
  ) {
    return reply.code(400).send(errorBody(ErrorCode.INVALID_INPUT, err.message, false, { field: 'body' }));
  }
  request.log.error({ err }, 'request failed');
  return reply.code(500).send(errorBody(ErrorCode.INTERNAL, 'internal error', false));
}

/**
 * Fastify's `frameworkErrors`: the router refused the path before any route ran — a parameter
 * that is not valid percent-encoding (`%FF`, `%G0`, a lone surrogate) or longer than the
 * router's bound (`ID_MAX_LENGTH`, so that every id the API accepts is routed: T5). Under
 * `/v1/workstreams/` the one parameter is the workstream id: 400 `INVALID_INPUT` naming it.
 * Elsewhere (a console asset, the docs' files) no such file exists: 404.
 */
export function refuseUnrouted(
  err: FastifyError,
  request: FastifyRequest,
  reply: FastifyReply,
): FastifyReply {
  if (err.code !== 'FST_ERR_BAD_URL' && err.code !== 'FST_ERR_MAX_PARAM_LENGTH') {
    request.log.error({ err }, 'request failed');
    return reply.code(500).send(errorBody(ErrorCode.INTERNAL, 'internal error', false));
  }
  if (request.url.startsWith('/v1/workstreams/')) {
    const why = err.code === 'FST_ERR_BAD_URL' ? 'is not valid percent-encoded UTF-8' : ID_RULE;
    return reply
      .code(400)
      .send(errorBody(ErrorCode.INVALID_INPUT, `workstreamId: ${why}`, false, { field: 'workstreamId' }));
  }
  return reply
    .code(404)
    .send(errorBody(HttpCode.NOT_FOUND, `no route ${request.method} ${request.url}`, false));
}

/** The status and body for a request the HTTP parser refused (`err.code` is node's or llhttp's). */
function malformed(code: string | undefined): [number, ErrorBody] {
  if (code === 'HPE_HEADER_OVERFLOW') {
    return [
      431,
      errorBody(ErrorCode.INVALID_INPUT, 'the request headers are too large', false, { field: 'headers' }),
    ];
  }
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return [408, errorBody(ErrorCode.TIMEOUT, 'the request did not arrive in time', true)];
  }
  return [
    400,
    errorBody(ErrorCode.INVALID_INPUT, 'the request is not valid HTTP/1.1', false, {
      field: 'request',
      ...(code === undefined ? {} : { reason: code }),
    }),
  ];
}

/**
 * Fastify's `clientErrorHandler` (node's `clientError`): a request the HTTP parser could not
 * read is answered in the documented body and the connection closed. The log line names the
 * parser's code and the status, never the error itself: it carries `rawPacket`, the request's
 * raw bytes — its `Authorization` header among them (tokens are never logged, T1).
 */
export function refuseMalformed(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Duplex): void {
  // A connection reset or already gone: there is no one to answer.
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, body] = malformed(err.code);
  this.log.debug({ code: err.code, status }, 'client error: malformed request refused');
  if (socket.writable) {
    const text = JSON.stringify(body);
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
    );
  }
  socket.destroy();
}
