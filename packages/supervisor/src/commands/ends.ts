/**
 * The one place a workstream's end is told, for a close and a delete alike: its listeners get
 * `ws_closed` and are removed (D6) — on every host: the event is relayed (cluster.ts) — and the
 * tenant's lifecycle feed advertises it (D5) where the tenant is known — on the host the call
 * was made on.
 */
import type { EventHub } from '../streams/events.js';
import type { LifecycleFeed } from '../streams/lifecycle-feed.js';

export interface EndsDeps {
  readonly events: Pick<EventHub, 'closeWorkstream'>;
  readonly lifecycle: Pick<LifecycleFeed, 'closed'>;
}

export interface EndNotice {
  /** The tenant whose feed advertises it (unknown to a host a call was routed to). */
  readonly tenantId: string | undefined;
}

export function workstreamEnded(
  deps: EndsDeps,
  workstreamId: string,
  reason: 'closed' | 'deleted',
  notice: EndNotice,
): void {
  deps.events.closeWorkstream(workstreamId, { reason });
  if (notice.tenantId !== undefined) deps.lifecycle.closed(notice.tenantId, workstreamId, reason);
}
