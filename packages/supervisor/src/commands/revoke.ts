/**
 * C7: a cancel, close or delete fences the workstream's earlier claims — sends queued or waiting
 * for a permit are revoked (SEND_REVOKED) — and says so when any were dropped.
 */
import type { Logger } from 'pino';
import type { SendQueue } from './send-queue.js';

export interface Revoker {
  readonly queue: Pick<SendQueue, 'fence'>;
  readonly logger: Logger;
}

export function revoke(
  deps: Revoker,
  workstreamId: string,
  ticket: number,
  reason: 'cancel' | 'close' | 'gone',
): void {
  const revoked = deps.queue.fence(workstreamId, ticket, reason);
  if (revoked > 0) deps.logger.info({ workstreamId, revoked, reason }, 'queued sends revoked');
}
