/** The demo tools and the shared abort-aware waiting helpers. */
export { demoTools } from './demo.js';
export { echoTool } from './echo.js';
export { failTool } from './fail.js';
export { heartbeatTool } from './heartbeat.js';
export { sleepTool } from './sleep.js';
export { abortError, DEFAULT_HEARTBEAT_EVERY_MS, heartbeatFor, throwIfAborted, wait } from './wait.js';
export { wedgeTool } from './wedge.js';
