/**
 * `turnwarden serve [--host 127.0.0.1] [--port 8787] [--db PATH | --postgres URL --host-id ID
 * [--redis URL]] [--config FILE]`: the runtime
 * and its HTTP API. With no token configured it mints one development token for tenant
 * `default`, prints it once, and still requires it. SIGTERM or SIGINT: a graceful shutdown
 * (readiness 503, running turns get `shutdownGraceMs`, then aborted with complete histories).
 */
import { parseArgs } from 'node:util';
import { loadServerConfig, startServer } from '@turnwarden/server';
import { UsageError } from '../args.js';
import type { Output } from '../output.js';

const SERVE_USAGE = `turnwarden serve — Turnwarden over HTTP

Usage:
  turnwarden serve [--host 127.0.0.1] [--port 8787] [--db PATH | --postgres URL --host-id ID
                   [--redis URL]] [--config FILE]

  --host HOST      interface to listen on (default 127.0.0.1)
  --port N         port (default 8787; 0 picks a free one)
  --db PATH        SQLite file (default ./turnwarden.db; ':memory:' for none)
  --postgres URL   a PostgreSQL database several hosts share (postgres://…; also
                   TURNWARDEN_POSTGRES), instead of --db
  --host-id ID     this host's stable id, required with --postgres (also TURNWARDEN_HOST_ID)
  --redis URL      with --postgres: relay the hosts' events through Redis Streams (redis://…;
                   also TURNWARDEN_REDIS), so an SSE reconnect resumes on any host
  --config FILE    a JSON configuration: host, port, db, postgres, postgresSchema, hostId, redis, tokens [{token, tenantId, principal}],
                   shutdownGraceMs, bodyLimitBytes, drainLimitBytes, drainTimeoutMs, keepAliveMs, logLevel, runtime {…}
                   (also TURNWARDEN_CONFIG; TURNWARDEN_HOST/PORT/DB/TOKENS override the file)

The API is under /v1 (every call needs 'Authorization: Bearer <token>'); the OpenAPI document
is at /openapi.json and its UI at /docs; /healthz, /readyz and /metrics need no token.
`;

export async function serveCommand(argv: readonly string[], output: Output): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        host: { type: 'string' },
        port: { type: 'string' },
        db: { type: 'string' },
        postgres: { type: 'string' },
        'host-id': { type: 'string' },
        redis: { type: 'string' },
        config: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (e) {
    throw new UsageError(`serve: ${(e as Error).message}`);
  }
  if (values.help === true) {
    output.out(SERVE_USAGE);
    return 0;
  }
  const port = values.port as string | undefined;
  if (port !== undefined && !/^\d+$/.test(port))
    throw new UsageError(`serve: --port must be a number (got '${port}')`);
  const config = loadServerConfig({
    ...(values.host === undefined ? {} : { host: values.host as string }),
    ...(port === undefined ? {} : { port: Number(port) }),
    ...(values.db === undefined ? {} : { db: values.db as string }),
    ...(values.postgres === undefined ? {} : { postgres: values.postgres as string }),
    ...(values['host-id'] === undefined ? {} : { hostId: values['host-id'] as string }),
    ...(values.redis === undefined ? {} : { redis: values.redis as string }),
    ...(values.config === undefined ? {} : { config: values.config as string }),
  });
  const server = await startServer(config);
  output.out(
    `turnwarden serve: listening on ${server.url} (API ${server.url}/v1, docs ${server.url}/docs)\n`,
  );
  if (server.devToken !== undefined) {
    output.out(
      `no tokens configured: development token for tenant 'default' (shown once):\n  ${server.devToken}\n` +
        `  curl -H 'Authorization: Bearer ${server.devToken}' ${server.url}/v1/workstreams\n`,
    );
  }
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
      output.out('turnwarden serve: shutting down\n');
      void server.shutdown().then(resolve);
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
  output.out('turnwarden serve: stopped\n');
  return 0;
}
