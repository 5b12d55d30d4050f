/**
 * The core's own tests: the unit tests and the runtime tests beside the core's files (the
 * journal gate, the watchdog, the scheduler, force-abandoning, the turn, the model steps, the
 * clock). `npm run mutation -- --suite core`.
 */
import { unitAnd } from './suites.js';

export default unitAnd(
  [
    'packages/clock/src/',
    'packages/supervisor/src/journal/',
    'packages/supervisor/src/liveness/',
    'packages/supervisor/src/turn/',
    'packages/supervisor/src/models/',
  ],
  { postgres: false },
);
