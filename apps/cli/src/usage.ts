/** Help texts. */
import { DEMO_DEFAULTS, LOG_LEVELS } from './args.js';

const d = DEMO_DEFAULTS;

export const MAIN_USAGE = `turnwarden — run and supervise LLM agent sessions in worker threads

Usage:
  turnwarden <command> [options]

Commands:
  demo     run many scripted sessions (normal, tool, heartbeating, stalled and wedged
           turns) under the liveness watchdog and check that every one was recovered
  serve    Turnwarden over HTTP: the API, events over SSE, OpenAPI, metrics (see: turnwarden serve --help)
  bench    run the benchmarks (see: turnwarden bench --help)
  scale    N concurrently streaming sessions beside the same turns in process, for N = 250,
           500, 1000 … (see: turnwarden scale --help)
  stress   explore thread interleavings with the harness (see: turnwarden stress --help)
  help     show this text, or 'turnwarden help <command>'

Options:
  -h, --help      show help
  -V, --version   show the version

Exit codes: 0 success, 1 a check or the command failed, 2 usage error.
`;

export const DEMO_USAGE = `turnwarden demo — the liveness demo

Usage:
  turnwarden demo [options]

Runs N workstreams concurrently, each with several turns played by the offline scripted
model: streamed answers, tool calls (with duplicate ids), long tools that heartbeat past the
watchdog timeout (must NOT be aborted, L2), stalled turns (aborted by the watchdog, L1) and
wedged turns (worker terminated after the grace period, L3). Then checks every outcome and
re-reads the durable history for dangling tool calls.

Workload:
  --workstreams N     concurrent workstreams (default ${d.workstreams})
  --turns N           turns per workstream, plus one idle check (default ${d.turns})
  --seed N            seed of the deterministic workload plan (default ${d.seed})

Runtime:
  --db PATH           SQLite file, recreated each run (default ./.turnwarden/demo.db);
                      ':memory:' for an in-memory store
  --timeout-ms N      watchdog timeout (default ${d.timeoutMs})
  --poll-ms N         watchdog poll interval (default ${d.pollMs})
  --grace-ms N        grace before a wedged worker is terminated (default ${d.graceMs})
  --max-workers N     session worker threads at most (default ${d.maxWorkers})
  --warm-workers N    warm workers kept ready (default ${d.warmWorkers})

Model:
  --provider NAME     scripted (default: the offline scripted model in the session worker) or
                      openai-compatible (the real provider over HTTP, @turnwarden/providers)
  --base-url URL      an OpenAI-compatible server (Ollama: http://localhost:11434/v1); without
                      it, a loopback server on 127.0.0.1 plays the same scripts over HTTP
  --model NAME        the server's model id (required with --base-url)
  --api-key-env VAR   the environment variable holding the server's key (never printed)
                      Against a real server the turns are plain prompts (some asking for the
                      echo tool), every one expected to complete; the integrity checks are the same.

Remote:
  --server URL        run the workload against a running 'turnwarden serve' over HTTP (its own
                      model plays the scripts; store-fault turns are left out); the histories
                      are read back over HTTP and audited
  --token TOKEN       its bearer token (default: TURNWARDEN_TOKEN)

Several hosts:
  --hosts N           run N 'turnwarden serve' processes (2–8) on one PostgreSQL database;
                      mid-run one is killed (SIGKILL) and, with 3 or more, another paused
                      (SIGSTOP) past its lease and resumed; the database is re-read and audited
                      (no dangling call, no row from a superseded lease holder, every turn
                      accounted for). Needs --postgres.
  --postgres [URL]    the database (postgres://…); without a URL a throwaway cluster from the
                      machine's PostgreSQL server binaries (Debian: apt-get install postgresql)
  --balancer          every call through a real load balancer in front of the hosts (HAProxy,
                      round robin; Debian: apt-get install haproxy), as clients of a fleet meet it
  --redis             the hosts relay their events through a throwaway Redis server (Redis
                      Streams; Debian: apt-get install redis-server) instead of PostgreSQL's
                      LISTEN/NOTIFY: an SSE reconnect to a host that never held the workstream
                      is replayed instead of replay_truncated

Output:
  --json              print only a JSON summary on stdout
  -q, --quiet         print only the summary
  --log-level LEVEL   supervisor log level: ${LOG_LEVELS.join(', ')} (default ${d.logLevel})
  --log-file PATH     supervisor log file (default demo.log next to the db)
  --log-stderr        send the supervisor log to stderr instead of a file

Exit code 0 when every integrity check passes, 1 when one fails (listed on stderr).
`;
