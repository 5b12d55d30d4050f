/**
 * The one place a workstream's end is told, for a close and a delete alike: its listeners get
 * `ws_closed` and are removed (D6), the other hosts are told (cluster.ts) unless the end was
 * theirs, and the tenant's lifecycle feed advertises it (D5) where the tenant is known — on the
 * host the call was made on.
 */
import type { Cluster } from '../cluster/cluster.js';
import type { EventHub } from '../streams/events.js';
import type { LifecycleFeed } from '../streams/lifecycle-feed.js';

export interface EndsDeps {
  readonly events: Pick<EventHub, 'closeWorkstream'>;
  readonly lifecycle: Pick<LifecycleFeed, 'closed'>;
  readonly cluster: Pick<Cluster, 'ended'> | undefined;
}

export interface EndNotice {
  /** The tenant whose feed advertises it (unknown to a host a call was routed to). */
  readonly tenantId: string | undefined;
  /** False when another host ended it and told the others itself. */
  readonly tellHosts: boolean;
}

export function workstreamEnded(
  deps: EndsDeps,
  workstreamId: string,
  reason: 'closed' | 'deleted',
  notice: EndNotice,
): void {
  deps.events.closeWorkstream(workstreamId, { reason });
  if (notice.tellHosts) deps.cluster?.ended(workstreamId, reason);
  if (notice.tenantId !== undefined) deps.lifecycle.closed(notice.tenantId, workstreamId, reason);
}
