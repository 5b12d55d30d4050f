/**
 * Errors over HTTP: every refusal is `{ error: { code, message, retryable, details? } }` with the
 * status its code calls for. Another tenant's workstream is 404, exactly as one that does not
 * exist (T2). Over capacity is 429 with `Retry-After` (T4). Bad bodies, unknown fields and
 * oversize bodies are 400 `INVALID_INPUT` naming the field, and nothing is written (T5).
 */
import { ErrorCode, isTurnwardenError, type TurnwardenError } from '@turnwarden/protocol';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';

const STATUS: Partial<Record<ErrorCode, number>> = {
  [ErrorCode.INVALID_INPUT]: 400,
  [ErrorCode.INVALID_SCRIPT]: 400,
  [ErrorCode.WORKSTREAM_NOT_FOUND]: 404,
  [ErrorCode.WORKSTREAM_EXISTS]: 409,
  [ErrorCode.WORKSTREAM_CLOSED]: 409,
  [ErrorCode.TURN_IN_PROGRESS]: 409,
  [ErrorCode.LEASED_ELSEWHERE]: 409,
  [ErrorCode.TOOL_CLEANUP_PENDING]: 409,
  [ErrorCode.COMMIT_CONFLICT]: 409,
  [ErrorCode.SEND_REVOKED]: 409,
  [ErrorCode.FENCED]: 409,
  [ErrorCode.TURN_ABORTED]: 409,
  [ErrorCode.QUEUE_FULL]: 429,
  [ErrorCode.CAPACITY_EXHAUSTED]: 429,
  [ErrorCode.TIMEOUT]: 504,
  [ErrorCode.SHUTTING_DOWN]: 503,
  [ErrorCode.STORE_ERROR]: 503,
};

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
  const status = STATUS[e.code as ErrorCode] ?? 500;
  const retryAfterMs = e.details?.retryAfterMs;
  if (status === 429) {
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
