/**
 * The HTTP API: every supervisor call as a route under `/v1`, authenticated by a bearer token
 * that names the tenant and principal (T1); events over Server-Sent Events that resume from the
 * replay ring with `Last-Event-ID` (E1) or continue a history read with its handoff token (E2);
 * health, readiness and Prometheus metrics. Request and response schemas are zod, which also
 * produces the OpenAPI document (`/docs`, `/openapi.json`).
 */
import { readFile } from 'node:fs/promises';
import { fastifySSE } from '@fastify/sse';
import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import {
  ABANDON_REASONS,
  type Bound,
  Bounds,
  DOUBLE_TEXTING_POLICIES,
  ERROR_TABLE,
  ErrorCode,
  errors,
  ID_MAX_LENGTH,
  ID_PATTERN,
  ID_RULE,
  Lengths,
  PERSISTENCE_STATES,
  SESSION_STATES,
  TURN_STATUSES,
  WORKSTREAM_STATUSES,
} from '@turnwarden/protocol';
import type { Turnwarden, TurnwardenEvent } from '@turnwarden/supervisor';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import {
  jsonSchemaTransform,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { Caller, Tokens } from './auth.js';
import { Drains } from './drain.js';
import { ERROR_CODES, errorBody, HttpCode, handleError, refuseMalformed, refuseUnrouted } from './errors.js';
import { Metrics } from './metrics.js';

export interface AppOptions {
  readonly tw: Turnwarden;
  readonly tokens: Tokens;
  readonly logger: Logger;
  /** Largest request body, in bytes (default 1 MiB). */
  readonly bodyLimit?: number;
  /**
   * A request answered before its body was read (over `bodyLimit`, no token, a bad id) has the
   * rest of its body read and discarded first, so that a client still sending reads the answer
   * instead of a reset: at most this many bytes (default 16 MiB; a larger Content-Length is not
   * read at all) …
   */
  readonly drainLimitBytes?: number;
  /** … for at most this long (default 10 s). Past either bound the connection is closed. */
  readonly drainTimeoutMs?: number;
  /** SSE keep-alive comment period (default 15 s). */
  readonly keepAliveMs?: number;
  /** The version `/healthz` reports. */
  readonly version?: string;
  /** What `/readyz` answers: the server's shutdown marks it not ready before the listener closes. */
  readonly readiness?: Readiness;
}

/**
 * Whether `/readyz` answers ready. A shutdown marks it down first, so that a load balancer
 * polling `/readyz` stops sending new requests while the listener still serves them
 * (`readinessDelayMs`); closing the app marks it down too.
 */
export class Readiness {
  private down = false;

  get ready(): boolean {
    return !this.down;
  }

  /** Not ready from now on. */
  stop(): void {
    this.down = true;
  }
}

declare module 'fastify' {
  interface FastifyRequest {
    caller?: Caller;
  }
}

const Id = z.string().regex(ID_PATTERN, ID_RULE);
const WorkstreamParams = z.strictObject({ workstreamId: Id });
const ErrorSchema = z.object({
  error: z.object({
    code: z.enum(ERROR_CODES),
    message: z.string(),
    retryable: z.boolean(),
    details: z.record(z.string(), z.unknown()).optional(),
  }),
});

/** An integer or a string within one of the API's bounds (packages/protocol/src/rules.ts). */
const int = (b: Bound) => z.number().int().min(b.min).max(b.max);
const text = (b: Bound) => z.string().min(b.min).max(b.max);
/** One of the members of an enum defined there: the union type and the document's enum agree. */
const oneOf = <T extends string>(members: readonly T[]) => z.enum(members as [T, ...T[]]);
const TurnStatusEnum = oneOf(TURN_STATUSES);
/** Why a turn was abandoned: an abort's reason, or `crash` (its worker died, T7). */
const AbandonReasonEnum = oneOf(ABANDON_REASONS);
const WorkstreamStatusEnum = oneOf(WORKSTREAM_STATUSES);
/** What a send does when the workstream is busy (issue 26, M1–M4). */
const DoubleTextingEnum = oneOf(DOUBLE_TEXTING_POLICIES).describe(
  'When the workstream is busy (a turn running on any host, sends waiting, a call waiting for approval): reject (409 TURN_IN_PROGRESS), enqueue (wait behind the turn), interrupt (force-cancel the running turn, its history repaired, and run next), rollback (as interrupt, and remove the cancelled turn’s rows)',
);
const WireErrorSchema = z
  .object({
    code: oneOf(Object.values(ErrorCode)),
    message: z.string(),
    retryable: z.boolean(),
    details: z.record(z.string(), z.unknown()).optional(),
  })
  .loose();
const Workstream = z.object({
  workstreamId: Id,
  tenantId: Id,
  incarnation: z.string(),
  status: WorkstreamStatusEnum.optional(),
  generation: z.number().optional(),
  createdAt: z.number().optional(),
  closedAt: z.number().optional(),
  doubleTexting: DoubleTextingEnum.optional(),
});
/** A call waiting for a person's approval (issue 26): its token decides it. */
const ApprovalRequestSchema = z.object({
  token: z.string(),
  callIndex: z.number(),
  callId: z.string(),
  name: z.string(),
  arguments: z.string().describe('The arguments the model gave (JSON object text)'),
  expiresAt: z.number().describe('When the wait ends unanswered and the call is denied (epoch ms)'),
});
/** A turn's result (`wait: true`). */
const TurnResultSchema = z.object({
  workstreamId: Id,
  generation: z.number(),
  status: TurnStatusEnum,
  finalText: z.string().optional(),
  abortReason: AbandonReasonEnum.optional(),
  error: WireErrorSchema.optional(),
  synthesized: z.number(),
  workerTerminated: z.boolean(),
  host: z.string().optional().describe('The host that ran the turn (cluster mode)'),
  approval: ApprovalRequestSchema.optional().describe(
    'awaiting_approval: the call that waits; approve or deny it with its token',
  ),
});
/**
 * The runtime's results are readonly and carry literal unions; the response schemas validate
 * their shape at the edge (and serialize them). The cast only bridges readonly to the schemas'
 * inferred mutable types.
 */
const json = <T>(value: Promise<T>): Promise<never> => value as Promise<never>;

/** A 204: no body. (`type: 'null'` is what tells the document generator the answer has no content.) */
const NoContent = z.null().meta({ type: 'null' });

/** The runtime's codes the error table answers with `status`. */
const codesOf = (status: number) =>
  (Object.keys(ERROR_TABLE) as ErrorCode[]).filter((code) => ERROR_TABLE[code].status === status).join(', ');

/** What each refusal status means; a route declares the ones it can answer. */
const REFUSALS = {
  400: 'INVALID_INPUT naming the field in details.field (INVALID_SCRIPT for a malformed script); nothing was written (T5)',
  401: 'UNAUTHORIZED: no bearer token, or one that names no tenant (T1)',
  404: 'WORKSTREAM_NOT_FOUND: this tenant has no such workstream; another tenant’s is answered the same (T2)',
  406: 'INVALID_INPUT (details.field Accept): the client refuses text/event-stream',
  409: `The workstream refuses the call as it is: ${codesOf(409)} (a STRUCTURE_VIOLATION is a compaction through a tool call and not its result)`,
  429: 'QUEUE_FULL or CAPACITY_EXHAUSTED, with Retry-After (T4)',
  500: 'INTERNAL: a fault of the server (or a runtime error without an HTTP status of its own)',
  503: 'SHUTTING_DOWN, or STORE_ERROR (the store failed; retryable when details say so)',
  504: 'TIMEOUT: a close with waitMs whose turn did not end in time (C2), or a call routed to the host holding the lease that did not answer',
} as const;
type RefusalStatus = keyof typeof REFUSALS;
/** The statuses every /v1 route can answer: bad input, no token, a fault, shutdown or the store. */
const BASE: readonly RefusalStatus[] = [400, 401, 500, 503];
const refusals = (...extra: RefusalStatus[]) =>
  Object.fromEntries(
    [...BASE, ...extra].map((status) => [status, ErrorSchema.describe(REFUSALS[status])]),
  ) as Record<RefusalStatus, typeof ErrorSchema>;

/** Builds the server (not listening). Close it before the runtime. */
export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const { tw, tokens } = options;
  // An answer to a request whose body was not read (refused before it, or over bodyLimit) waits
  // for the rest of the body to be read and discarded, within bounds: closing the connection
  // on a client still sending resets it, and it never reads the answer (drain.ts).
  const drains = new Drains({
    bytes: options.drainLimitBytes ?? 16 * 1024 * 1024,
    ms: options.drainTimeoutMs ?? 10_000,
  });
  const app = Fastify({
    loggerInstance: options.logger as FastifyBaseLogger,
    bodyLimit: options.bodyLimit ?? 1024 * 1024,
    // Request ids in every log line of a request.
    genReqId: () => crypto.randomUUID(),
    // The router's bound on a path parameter is the id's: every id the API accepts can be
    // addressed by every route (its default, 100, left ids of 101–128 characters unreachable).
    routerOptions: { maxParamLength: ID_MAX_LENGTH },
    // The router's and the HTTP parser's own refusals, in the documented body. No hook runs for
    // the router's: its drain is here.
    frameworkErrors: (err, request, reply) => {
      void drains.drain(request.raw).then((drained) => {
        if (!drained) reply.header('connection', 'close');
        refuseUnrouted(err, request, reply);
      });
    },
    clientErrorHandler: refuseMalformed,
  }).withTypeProvider<ZodTypeProvider>();
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.setErrorHandler(handleError);
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send(errorBody(HttpCode.NOT_FOUND, `no route ${request.method} ${request.url}`, false)),
  );
  app.addHook('onSend', async (request, reply, payload) => {
    if (!(await drains.drain(request.raw))) reply.header('connection', 'close');
    return payload;
  });
  app.addHook('preClose', async () => drains.stopAll());
  await app.register(fastifySwagger, {
    openapi: {
      info: {
        title: 'Turnwarden',
        description:
          'Supervised LLM agent sessions over HTTP. Every /v1 route needs a bearer token naming a tenant and a principal.',
        version: options.version ?? '0.1.0',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    transform: jsonSchemaTransform,
  });
  await app.register(fastifySwaggerUi, { routePrefix: '/docs' });
  await app.register(fastifySSE, { heartbeatInterval: options.keepAliveMs ?? 15_000 });
  // Event streams end when the server closes (graceful shutdown): clients reconnect elsewhere.
  const streams = new Set<AbortController>();
  const metrics = new Metrics(tw, () => streams.size);
  app.addHook('preClose', async () => {
    for (const stream of streams) stream.abort();
  });
  app.addHook('onResponse', async (request, reply) => {
    metrics.request(
      request.routeOptions.url ?? 'unknown',
      request.method,
      reply.statusCode,
      reply.elapsedTime,
    );
  });

  // ── operations (no token) ────────────────────────────────────────────────
  app.get('/healthz', { schema: { hide: true } }, async () => ({
    status: 'ok',
    version: options.version ?? '0.1.0',
  }));
  const readiness = options.readiness ?? new Readiness();
  app.addHook('onClose', async () => readiness.stop());
  app.get('/readyz', { schema: { hide: true } }, async (_request, reply) => {
    const stats = tw.stats();
    if (!readiness.ready) return reply.code(503).send({ ready: false, reason: 'shutting down' });
    return { ready: true, activeTurns: stats.activeTurns, waiting: stats.admission.waiting };
  });
  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    reply.header('content-type', metrics.contentType);
    return metrics.render();
  });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  // ── the live console (static; it asks for a token and calls the API) ────
  const consoleDir = new URL('../console/', import.meta.url);
  // A Map, not an object: a name such as `constructor` or `__proto__` is no asset.
  const assets = new Map([
    ['index.html', 'text/html; charset=utf-8'],
    ['console.js', 'text/javascript; charset=utf-8'],
    ['console.css', 'text/css; charset=utf-8'],
  ]);
  app.get('/', { schema: { hide: true } }, async (_request, reply) => reply.redirect('/console'));
  app.get('/console', { schema: { hide: true } }, async (_request, reply) =>
    reply.type(assets.get('index.html')!).send(await readFile(new URL('index.html', consoleDir))),
  );
  app.get<{ Params: { file: string } }>(
    '/console/:file',
    { schema: { hide: true } },
    async (request, reply) => {
      const type = assets.get(request.params.file);
      if (type === undefined)
        return reply.code(404).send(errorBody(HttpCode.NOT_FOUND, 'no such asset', false));
      return reply.type(type).send(await readFile(new URL(request.params.file, consoleDir)));
    },
  );

  // ── the API (a bearer token on every call) ───────────────────────────────
  await app.register(
    async (api) => {
      api.addHook('onRequest', async (request, reply) => {
        const caller = tokens.callerOf(request.headers.authorization);
        if (caller === undefined) {
          reply.header('www-authenticate', 'Bearer');
          return reply
            .code(401)
            .send(errorBody(HttpCode.UNAUTHORIZED, 'a valid bearer token is required', false));
        }
        request.caller = caller;
        return undefined;
      });
      const who = (request: { caller?: Caller }): Caller => {
        if (request.caller === undefined) throw errors.internal('no caller');
        return request.caller;
      };
      const r = api.withTypeProvider<ZodTypeProvider>();

      r.post(
        '/workstreams',
        {
          schema: {
            summary:
              'Create a workstream (a fresh id unless one is given); each creation mints an incarnation (D1)',
            body: z
              .strictObject({
                workstreamId: Id.optional(),
                doubleTexting: DoubleTextingEnum.optional().describe(
                  'The default for its sends (default enqueue); a send may name its own',
                ),
              })
              .nullish(),
            response: { 201: Workstream, ...refusals(409) },
          },
        },
        async (request, reply) => {
          const created = await tw.createWorkstream({ ...who(request), ...(request.body ?? {}) });
          return reply.code(201).send(created);
        },
      );

      r.get(
        '/workstreams',
        {
          schema: {
            summary: "The tenant's workstreams in id order, a page at a time",
            querystring: z.strictObject({
              status: WorkstreamStatusEnum.optional(),
              limit: z.coerce.number().int().min(Bounds.limit.min).max(Bounds.limit.max).optional(),
              cursor: text(Lengths.cursor).optional(),
            }),
            response: {
              200: z.object({ items: z.array(Workstream), nextCursor: z.string().optional() }),
              ...refusals(),
            },
          },
        },
        async (request) => json(tw.listWorkstreams({ ...who(request), ...request.query })),
      );

      r.get(
        '/workstreams/:workstreamId',
        {
          schema: {
            summary: 'One workstream',
            params: WorkstreamParams,
            response: { 200: Workstream, ...refusals(404) },
          },
        },
        async (request) => tw.getWorkstream({ ...who(request), ...request.params }),
      );

      r.delete(
        '/workstreams/:workstreamId',
        {
          schema: {
            summary:
              'Delete the incarnation named (D1); an ambiguous store failure leaves it hidden until a retry (D2)',
            params: WorkstreamParams,
            querystring: z.strictObject({ incarnation: text(Lengths.incarnation) }),
            response: { 204: NoContent.describe('Deleted'), ...refusals(404, 504) },
          },
        },
        async (request, reply) => {
          await tw.deleteWorkstream({
            ...who(request),
            ...request.params,
            incarnation: request.query.incarnation,
          });
          return reply.code(204).send(null);
        },
      );

      r.post(
        '/workstreams/:workstreamId/messages',
        {
          schema: {
            summary:
              'Send a message: resolves once its turn has started (or, with wait, ended). Over capacity it waits for a worker up to maxWaitMs (429 with Retry-After when the queue is full, T4)',
            params: WorkstreamParams,
            body: z.strictObject({
              content: z.string().min(1),
              tools: z.array(z.string()).optional(),
              requireApproval: z
                .union([z.array(z.string()), z.literal('all')])
                .optional()
                .describe(
                  'Calls of this turn that wait for approve or deny before they run, by tool name (all: every call)',
                ),
              maxWaitMs: int(Bounds.maxWaitMs).optional(),
              doubleTexting: DoubleTextingEnum.optional(),
              wait: z.boolean().optional(),
            }),
            response: {
              202: z.object({ workstreamId: Id, generation: z.number() }),
              200: TurnResultSchema,
              ...refusals(404, 409, 429),
            },
          },
        },
        async (request, reply) => {
          const { wait, ...message } = request.body;
          // A client that goes away before its turn is admitted withdraws the send; once the turn
          // has started, a disconnect leaves it running (cancel is its own route).
          const gone = new AbortController();
          let admitted = false;
          reply.raw.on('close', () => {
            if (!admitted && !reply.raw.writableEnded) gone.abort();
          });
          const turn = await tw.send({ ...who(request), ...request.params, ...message, signal: gone.signal });
          admitted = true;
          if (wait !== true)
            return reply.code(202).send({ workstreamId: turn.workstreamId, generation: turn.generation });
          return reply.code(200).send(await json(turn.done));
        },
      );

      r.post(
        '/workstreams/:workstreamId/cancel',
        {
          schema: {
            summary:
              'Force cancel: a running turn is aborted and its open calls get results (C3); an idle one with debt is repaired',
            params: WorkstreamParams,
            response: { 200: z.object({ cancelled: z.boolean() }), ...refusals(404, 409, 504) },
          },
        },
        async (request) => ({ cancelled: await tw.cancel({ ...who(request), ...request.params }) }),
      );

      for (const approved of [true, false]) {
        r.post(
          `/workstreams/:workstreamId/${approved ? 'approve' : 'deny'}`,
          {
            schema: {
              summary: approved
                ? 'Approve the call the turn waits for (its approval_requested token): the turn resumes and the call runs — with arguments instead of the model’s when given (A2, A3)'
                : 'Deny the call the turn waits for: the turn resumes, the call’s result says it was denied (effect none) and the model goes on (A2, A3)',
              params: WorkstreamParams,
              body: approved
                ? z.strictObject({
                    token: z.string().min(1).max(128),
                    arguments: z.record(z.string(), z.unknown()).optional(),
                    wait: z.boolean().optional(),
                  })
                : z.strictObject({
                    token: z.string().min(1).max(128),
                    reason: z.string().min(1).max(4_096).optional(),
                    wait: z.boolean().optional(),
                  }),
              response: {
                200: z
                  .object({
                    status: z.enum(['resumed', 'already_decided']),
                    generation: z.number().optional(),
                    result: TurnResultSchema.optional(),
                  })
                  .describe(
                    'already_decided: the same decision was taken already, nothing changed; resumed: the turn goes on (with wait, its result)',
                  ),
                ...refusals(400, 404, 409, 429),
              },
            },
          },
          async (request) => {
            const { wait, ...decision } = request.body as { wait?: boolean; token: string };
            const input = { ...who(request), ...request.params, ...decision };
            const decided = approved
              ? await tw.approve(input as Parameters<Turnwarden['approve']>[0])
              : await tw.deny(input as Parameters<Turnwarden['deny']>[0]);
            if (decided.status === 'already_decided') return { status: 'already_decided' as const };
            const { turn } = decided;
            if (wait !== true) return { status: 'resumed' as const, generation: turn.generation };
            return json(
              turn.done.then((result) => ({
                status: 'resumed' as const,
                generation: turn.generation,
                result,
              })),
            );
          },
        );
      }

      r.post(
        '/workstreams/:workstreamId/close',
        {
          schema: {
            summary: 'Close (final). With waitMs, a running turn is waited for (C1)',
            params: WorkstreamParams,
            body: z.strictObject({ waitMs: int(Bounds.waitMs).optional() }).nullish(),
            response: { 204: NoContent.describe('Closed'), ...refusals(404, 409, 504) },
          },
        },
        async (request, reply) => {
          await tw.close({ ...who(request), ...request.params, ...(request.body ?? {}) });
          return reply.code(204).send(null);
        },
      );

      r.get(
        '/workstreams/:workstreamId/status',
        {
          schema: {
            summary: "The session machine's state, the journal's persistence status, the queue",
            params: WorkstreamParams,
            response: {
              200: z.object({
                workstreamId: Id,
                tenantId: Id,
                state: oneOf(SESSION_STATES),
                generation: z.number(),
                cleanupPending: z.boolean(),
                persistence: z.object({
                  state: oneOf(PERSISTENCE_STATES),
                  pendingRows: z.number(),
                  attempts: z.number().optional(),
                  nextRetryAt: z.number().optional(),
                  error: WireErrorSchema.optional(),
                }),
                queuedSends: z.number(),
                activeTurn: z
                  .object({
                    generation: z.number(),
                    idleMs: z.number(),
                    lastActivity: z.string(),
                    abortReason: AbandonReasonEnum.optional(),
                  })
                  .optional(),
                awaitingApproval: z
                  .object({ token: z.string(), callIndex: z.number(), expiresAt: z.number() })
                  .optional()
                  .describe('The session waits for the approval of a call: the token that decides it'),
              }),
              ...refusals(404),
            },
          },
        },
        async (request) => json(tw.status({ ...who(request), ...request.params })),
      );

      r.get(
        '/workstreams/:workstreamId/history',
        {
          schema: {
            summary:
              'The durable history and its handoff token: subscribe with it to continue exactly after these rows (E2). Without limit or cursor, the whole history; with them, a page at a time: each page but the last answers nextCursor, the last the handoff, which continues after all the pages’ rows',
            params: WorkstreamParams,
            querystring: z.strictObject({
              limit: z.coerce
                .number()
                .int()
                .min(Bounds.historyLimit.min)
                .max(Bounds.historyLimit.max)
                .optional()
                .describe(
                  'Rows per page; default: with cursor, the limit of the page that returned it, without, the whole history',
                ),
              cursor: text(Lengths.cursor).optional().describe('The previous page’s nextCursor'),
            }),
            response: {
              200: z.object({
                rows: z.array(z.object({ seq: z.number() }).loose()),
                handoff: z
                  .string()
                  .optional()
                  .describe(
                    'On the whole history or the last page: subscribe with it (?handoff=) to continue (E2)',
                  ),
                nextCursor: z.string().optional().describe('On a page with more after it: pass it as cursor'),
              }),
              ...refusals(404),
            },
          },
        },
        async (request) => json(tw.history({ ...who(request), ...request.params, ...request.query })),
      );

      r.post(
        '/workstreams/:workstreamId/compact',
        {
          schema: {
            summary:
              'Replace rows 1..throughSeq with a system summary (fenced by a running turn’s abort, L8)',
            params: WorkstreamParams,
            body: z.strictObject({
              throughSeq: int(Bounds.throughSeq),
              summary: z.string().min(1),
              commitKey: z.string().min(1).optional(),
            }),
            response: { 200: z.object({ removed: z.number() }), ...refusals(404, 409) },
          },
        },
        async (request) => tw.compact({ ...who(request), ...request.params, ...request.body }),
      );

      r.post(
        '/workstreams/:workstreamId/rewind',
        {
          schema: {
            summary: 'Drop the last turns of an idle workstream',
            params: WorkstreamParams,
            body: z.strictObject({
              turns: int(Bounds.rewindTurns),
              ifLastSeq: int(Bounds.ifLastSeq).optional(),
            }),
            response: { 200: z.object({ removed: z.number(), lastSeq: z.number() }), ...refusals(404, 409) },
          },
        },
        async (request) => tw.rewind({ ...who(request), ...request.params, ...request.body }),
      );

      r.get(
        '/workstreams/:workstreamId/events',
        {
          sse: { kind: 'only' },
          schema: {
            summary:
              'Events as Server-Sent Events (id = event id). Reconnect with Last-Event-ID to replay what was missed, or get replay_truncated (E1); or start after a history read with ?handoff= (E2). A client too slow gets stream_overflow and the stream ends (E3)',
            params: WorkstreamParams,
            querystring: z.strictObject({ handoff: text(Lengths.handoff).optional() }),
            response: {
              200: {
                description:
                  'The stream: one frame per event — `id:` the event id, `event:` its type, `data:` the event as JSON',
                content: { 'text/event-stream': { schema: z.string() } },
              },
              ...refusals(404, 406),
            },
          },
          // The SSE plugin refuses a client that will not take text/event-stream with a 406 of
          // its own shape: answered in the documented body instead.
          preSerialization: async (_request, reply, payload) =>
            reply.statusCode === 406
              ? errorBody(ErrorCode.INVALID_INPUT, 'this route answers text/event-stream only', false, {
                  field: 'Accept',
                })
              : payload,
        },
        async (request, reply) => {
          const caller = who(request);
          const header = request.headers['last-event-id'];
          const last = typeof header === 'string' && /^\d+$/.test(header) ? Number(header) : undefined;
          if (typeof header === 'string' && last === undefined) {
            throw errors.invalidInput('Last-Event-ID must be an event id', { field: 'Last-Event-ID' });
          }
          // Another tenant's workstream, or none: 404 before the stream starts (T2).
          await tw.getWorkstream({ ...caller, ...request.params });
          const stop = new AbortController();
          const iterator = tw.events({
            ...caller,
            ...request.params,
            ...(last === undefined ? {} : { lastEventId: last }),
            ...(request.query.handoff === undefined ? {} : { handoff: request.query.handoff }),
            signal: stop.signal,
          });
          streams.add(stop);
          reply.sse.onClose(() => {
            stop.abort();
            streams.delete(stop);
          });
          // The stream is open from now on: a client sees its headers before any event. (Node
          // holds a written head until the first body byte — the first event or keep-alive,
          // `keepAliveMs` later on a quiet workstream — unless it is flushed.)
          reply.sse.sendHeaders();
          reply.raw.flushHeaders();
          const frames = async function* (): AsyncGenerator<{
            id: string;
            event: string;
            data: TurnwardenEvent;
          }> {
            for await (const e of iterator) yield { id: String(e.id), event: e.type, data: e };
          };
          try {
            await reply.sse.send(frames());
          } finally {
            // However the stream ended (the client gone before onClose was registered, a write
            // to a closed connection): the subscription and its controller go with it.
            stop.abort();
            streams.delete(stop);
          }
        },
      );
    },
    { prefix: '/v1' },
  );

  return app as unknown as FastifyInstance;
}
