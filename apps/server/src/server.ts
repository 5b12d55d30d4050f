/**
 * `turnwarden serve`: the runtime and its HTTP API in one process. Configuration comes from a
 * JSON file and the environment, validated at start (a bad value stops the start, naming it).
 * With no token configured, one development token is minted for tenant `default`, printed once,
 * and still required. SIGTERM and SIGINT shut down gracefully: readiness goes 503, event streams
 * end, running turns get `shutdownGraceMs` to finish, then the runtime aborts the rest — their
 * open tool calls get results (`unknown`), nothing is half-written — and the server closes.
 */

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { errors, HOST_ID_PATTERN, ID_PATTERN, type TurnwardenError } from '@turnwarden/protocol';
import { RedisRelay } from '@turnwarden/relay-redis';
import { Turnwarden, type TurnwardenOptions } from '@turnwarden/supervisor';
import type { FastifyInstance } from 'fastify';
import { type Logger, pino } from 'pino';
import { z } from 'zod';
import { buildApp, Readiness } from './app.js';
import { type TokenGrant, Tokens } from './auth.js';

const Grant = z.strictObject({
  token: z.string().min(16, 'must be at least 16 characters'),
  tenantId: z.string().regex(ID_PATTERN),
  principal: z.string().regex(ID_PATTERN),
});

const ServerConfigSchema = z.strictObject({
  host: z.string().min(1).default('127.0.0.1'),
  port: z.number().int().min(0).max(65_535).default(8787),
  /** SQLite file (`:memory:` for none). */
  db: z.string().min(1).default('./turnwarden.db'),
  /**
   * A PostgreSQL connection string: the store several hosts share instead of `db` (each host
   * with its own `hostId`; see docs/cluster.md).
   */
  postgres: z
    .string()
    .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL')
    .optional(),
  /** The schema of the PostgreSQL store (default public). */
  postgresSchema: z
    .string()
    .regex(/^[a-z_][a-z0-9_]{0,62}$/)
    .optional(),
  /** This host's stable id (1–64 of A–Z a–z 0–9 . _ -); required with `postgres`. */
  hostId: z.string().regex(HOST_ID_PATTERN).optional(),
  /**
   * A Redis server the hosts relay their events through (Redis Streams), with `postgres`: each
   * workstream's recent events are kept there, so an SSE client reconnecting to any host
   * resumes by its `Last-Event-ID`. Without it the events go over PostgreSQL's `LISTEN/NOTIFY`,
   * which keeps nothing (docs/cluster.md).
   */
  redis: z
    .string()
    .regex(/^rediss?:\/\//, 'must be a redis:// URL')
    .optional(),
  tokens: z.array(Grant).default([]),
  /** Running turns get this long to finish at shutdown before they are aborted. */
  shutdownGraceMs: z.number().int().min(0).max(600_000).default(10_000),
  /**
   * At shutdown, `/readyz` answers 503 this long before the listener closes, while every other
   * route is still served: time for a load balancer polling `/readyz` to stop sending requests
   * here. 0 (the default) closes the listener at once. Counted within `shutdownGraceMs`.
   */
  readinessDelayMs: z.number().int().min(0).max(600_000).default(0),
  bodyLimitBytes: z
    .number()
    .int()
    .min(1024)
    .max(64 * 1024 * 1024)
    .default(1024 * 1024),
  /** A refused request's body is read and discarded up to this many bytes (then the connection closes). */
  drainLimitBytes: z
    .number()
    .int()
    .min(0)
    .max(1024 * 1024 * 1024)
    .default(16 * 1024 * 1024),
  /** … for at most this long. */
  drainTimeoutMs: z.number().int().min(0).max(600_000).default(10_000),
  keepAliveMs: z.number().int().min(100).max(600_000).default(15_000),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** The runtime's configuration (`Turnwarden.start`), without store and logger. */
  runtime: z.record(z.string(), z.unknown()).default({}),
});

export type ServerConfig = z.infer<typeof ServerConfigSchema>;
export type ServerConfigInput = z.input<typeof ServerConfigSchema>;

/** The runtime the server starts when none is configured: the offline scripted model. */
const DEFAULT_RUNTIME = { pluginModules: ['@turnwarden/session/scripted'], model: 'scripted' };

function invalid(message: string, field: string): TurnwardenError {
  return errors.invalidConfig(message, { field });
}

/** Validates a configuration; a refusal is INVALID_CONFIG naming the field. */
export function checkServerConfig(input: unknown): ServerConfig {
  const parsed = ServerConfigSchema.safeParse(input ?? {});
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = issue.path.join('.') || (issue as { keys?: string[] }).keys?.[0] || 'config';
    // A connection string may carry a password: never echo the value.
    throw invalid(`${field}: ${issue.message}`, field);
  }
  if (parsed.data.postgres !== undefined && parsed.data.hostId === undefined) {
    throw invalid('hostId: required with postgres (each host of a cluster has a stable id)', 'hostId');
  }
  if (parsed.data.redis !== undefined && parsed.data.postgres === undefined) {
    throw invalid('redis: relays the events of several hosts: it needs postgres', 'redis');
  }
  return parsed.data;
}

/**
 * The configuration from a file (`--config` or TURNWARDEN_CONFIG), then the environment
 * (TURNWARDEN_HOST, TURNWARDEN_PORT, TURNWARDEN_DB, TURNWARDEN_POSTGRES, TURNWARDEN_HOST_ID,
 * TURNWARDEN_REDIS, TURNWARDEN_TOKENS as a JSON array), then
 * explicit overrides (flags).
 */
export function loadServerConfig(
  overrides: Partial<ServerConfigInput> & { readonly config?: string } = {},
  env: NodeJS.ProcessEnv = process.env,
): ServerConfig {
  const { config: file = env.TURNWARDEN_CONFIG, ...flags } = overrides;
  let fromFile: Record<string, unknown> = {};
  if (file !== undefined) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      throw invalid(`config file ${file}: ${(e as NodeJS.ErrnoException).code ?? 'unreadable'}`, 'config');
    }
    try {
      fromFile = JSON.parse(text) as Record<string, unknown>;
    } catch {
      // The parser's message quotes the text around the error, which may hold a token.
      throw invalid(`config file ${file} is not valid JSON`, 'config');
    }
  }
  const fromEnv: Record<string, unknown> = {};
  if (env.TURNWARDEN_HOST !== undefined) fromEnv.host = env.TURNWARDEN_HOST;
  if (env.TURNWARDEN_PORT !== undefined) fromEnv.port = Number(env.TURNWARDEN_PORT);
  if (env.TURNWARDEN_DB !== undefined) fromEnv.db = env.TURNWARDEN_DB;
  if (env.TURNWARDEN_POSTGRES !== undefined) fromEnv.postgres = env.TURNWARDEN_POSTGRES;
  if (env.TURNWARDEN_HOST_ID !== undefined) fromEnv.hostId = env.TURNWARDEN_HOST_ID;
  if (env.TURNWARDEN_REDIS !== undefined) fromEnv.redis = env.TURNWARDEN_REDIS;
  if (env.TURNWARDEN_TOKENS !== undefined) {
    try {
      fromEnv.tokens = JSON.parse(env.TURNWARDEN_TOKENS) as unknown;
    } catch {
      throw invalid('TURNWARDEN_TOKENS is not JSON', 'tokens');
    }
  }
  const defined = Object.fromEntries(Object.entries(flags).filter(([, v]) => v !== undefined));
  return checkServerConfig({ ...fromFile, ...fromEnv, ...defined });
}

export interface RunningServer {
  readonly url: string;
  readonly app: FastifyInstance;
  readonly tw: Turnwarden;
  /** The development token minted because none was configured. */
  readonly devToken?: string;
  /** Graceful shutdown (what SIGTERM runs); resolves once everything is closed. */
  shutdown(): Promise<void>;
}

export interface StartOptions {
  readonly logger?: Logger;
  /** Runtime seams for tests (passed to Turnwarden.start). */
  readonly runtime?: Partial<TurnwardenOptions>;
  /** The wait of `readinessDelayMs` at shutdown (a test seam; default a timer). */
  readonly readinessDelay?: (ms: number) => Promise<void>;
}

export async function startServer(config: ServerConfig, options: StartOptions = {}): Promise<RunningServer> {
  const logger = options.logger ?? pino({ name: 'turnwarden-server', level: config.logLevel });
  let grants: TokenGrant[] = config.tokens;
  let devToken: string | undefined;
  if (grants.length === 0) {
    devToken = `twdev_${randomBytes(24).toString('base64url')}`;
    grants = [{ token: devToken, tenantId: 'default', principal: 'dev' }];
  }
  const runtimeConfig = {
    ...DEFAULT_RUNTIME,
    ...config.runtime,
    ...(config.hostId === undefined ? {} : { hostId: config.hostId }),
    ...options.runtime,
  } as TurnwardenOptions;
  const tw = await Turnwarden.start({
    ...runtimeConfig,
    store:
      config.postgres === undefined
        ? { path: config.db }
        : {
            postgres: config.postgres,
            ...(config.postgresSchema === undefined ? {} : { schema: config.postgresSchema }),
          },
    ...(config.redis === undefined ? {} : { relay: new RedisRelay({ url: config.redis }) }),
    logger: logger.child({ component: 'runtime' }),
  });
  let app: FastifyInstance;
  const readiness = new Readiness();
  try {
    app = await buildApp({
      tw,
      readiness,
      tokens: new Tokens(grants),
      logger,
      bodyLimit: config.bodyLimitBytes,
      drainLimitBytes: config.drainLimitBytes,
      drainTimeoutMs: config.drainTimeoutMs,
      keepAliveMs: config.keepAliveMs,
    });
    await app.listen({ host: config.host, port: config.port });
  } catch (e) {
    await tw.shutdown();
    throw e;
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : config.port;
  const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
  let closing: Promise<void> | undefined;
  const shutdown = () => {
    closing ??= (async () => {
      logger.info(
        { graceMs: config.shutdownGraceMs, activeTurns: tw.stats().activeTurns },
        'shutting down: no new requests',
      );
      const deadline = Date.now() + config.shutdownGraceMs;
      // Readiness goes 503 first; the listener keeps serving for readinessDelayMs, so that a load
      // balancer polling /readyz takes this host out before its connections are refused.
      readiness.stop();
      if (config.readinessDelayMs > 0) {
        logger.info(
          { readinessDelayMs: config.readinessDelayMs },
          'readiness 503: closing the listener after the delay',
        );
        await (options.readinessDelay ?? sleep)(config.readinessDelayMs);
      }
      // New connections are refused; streams end (clients reconnect elsewhere).
      const closed = app.close();
      while (tw.stats().activeTurns > 0 && Date.now() < deadline) await sleep(50);
      const left = tw.stats().activeTurns;
      if (left > 0) logger.warn({ turns: left }, 'turns still running after the grace period: aborting them');
      // Aborts what still runs (reason shutdown): open calls get results, nothing is half-written.
      await tw.shutdown();
      await closed;
      logger.info('server stopped');
    })();
    return closing;
  };
  logger.info({ url, tokens: grants.length }, 'turnwarden server listening');
  return { url, app, tw, ...(devToken === undefined ? {} : { devToken }), shutdown };
}
