/**
 * C7: a cancel, close or delete fences the workstream's earlier claims — sends queued or waiting
 * for a permit are revoked (SEND_REVOKED) — and says so when any were dropped. In cluster mode
 * the sends queued durably are revoked too, wherever they were queued (durable-sends.ts): the
 * returned promise settles once that is durable (it never rejects; a failure is logged).
 */
import type { Logger } from 'pino';
import type { DurableSends } from './durable-sends.js';
import type { SendQueue } from './send-queue.js';

export interface Revoker {
  readonly queue: Pick<SendQueue, 'fence'>;
  readonly logger: Logger;
  readonly durable?: Pick<DurableSends, 'revoke'> | undefined;
}

export function revoke(
  deps: Revoker,
  workstreamId: string,
  ticket: number,
  reason: 'cancel' | 'close' | 'gone',
  /** An interrupt's own send's row (M3): it and the sends queued after it are kept. */
  beforeId?: number,
): Promise<void> {
  const revoked = deps.queue.fence(workstreamId, ticket, reason);
  if (revoked > 0) deps.logger.info({ workstreamId, revoked, reason }, 'queued sends revoked');
  if (deps.durable === undefined) return Promise.resolve();
  return deps.durable.revoke(workstreamId, reason, ticket, beforeId).catch((err: unknown) => {
    deps.logger.warn({ err, workstreamId, reason }, 'durably queued sends not revoked');
  });
}
