/** @turnwarden/server — Turnwarden over HTTP. */
export { type AppOptions, buildApp, Readiness } from './app.js';
export { type Caller, type TokenGrant, Tokens } from './auth.js';
export {
  checkServerConfig,
  loadServerConfig,
  type RunningServer,
  type ServerConfig,
  type ServerConfigInput,
  type StartOptions,
  startServer,
} from './server.js';
