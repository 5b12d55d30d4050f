// Serves a tiny API over the port it is given; `hang` never settles, `fail` throws a typed error.
import { workerData } from 'node:worker_threads';
import { ErrorCode, serve, TurnwardenError } from '../../dist/index.js';

serve(workerData.port, {
  async echo(x) {
    return x;
  },
  hang() {
    return new Promise(() => {});
  },
  async fail() {
    throw new TurnwardenError(ErrorCode.TOOL_ERROR, 'no such thing', { details: { why: 'test' } });
  },
});
