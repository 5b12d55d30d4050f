/**
 * A tenant's workstream lifecycle feed (D5): `ws_created` once a creation has committed and
 * `ws_closed` when a workstream is closed or deleted. A workstream whose creation was never
 * confirmed — the store failed ambiguously, so the row may exist — is never advertised, and so
 * its close is not either; a workstream created again under its id is advertised as usual, and
 * its close is not suppressed by its unadvertised predecessor.
 */
import type { Logger } from 'pino';

export interface WorkstreamLifecycleEvent {
  readonly type: 'ws_created' | 'ws_closed';
  readonly tenantId: string;
  readonly workstreamId: string;
  /** The incarnation created (`ws_created`). */
  readonly incarnation?: string;
  /** Why it closed (`ws_closed`). */
  readonly reason?: 'closed' | 'deleted';
}

export type LifecycleListener = (event: WorkstreamLifecycleEvent) => void;

export class LifecycleFeed {
  private readonly byTenant = new Map<string, Set<LifecycleListener>>();
  /** Ids whose last creation was never confirmed: not advertised, their close not either. */
  private readonly unadvertised = new Set<string>();

  constructor(private readonly logger: Logger) {}

  subscribe(tenantId: string, listener: LifecycleListener): () => void {
    let set = this.byTenant.get(tenantId);
    if (set === undefined) {
      set = new Set();
      this.byTenant.set(tenantId, set);
    }
    set.add(listener);
    return () => {
      const s = this.byTenant.get(tenantId);
      s?.delete(listener);
      if (s?.size === 0) this.byTenant.delete(tenantId);
    };
  }

  /** A creation committed: advertised from here on. */
  created(tenantId: string, workstreamId: string, incarnation: string): void {
    this.unadvertised.delete(workstreamId);
    this.emit({ type: 'ws_created', tenantId, workstreamId, incarnation });
  }

  /** A creation failed ambiguously: the row may exist, but it was never advertised. */
  unconfirmed(workstreamId: string): void {
    this.unadvertised.add(workstreamId);
  }

  closed(tenantId: string, workstreamId: string, reason: 'closed' | 'deleted'): void {
    if (this.unadvertised.has(workstreamId)) {
      // Never advertised: nothing to take back. A delete ends it; a successor starts afresh.
      if (reason === 'deleted') this.unadvertised.delete(workstreamId);
      return;
    }
    this.emit({ type: 'ws_closed', tenantId, workstreamId, reason });
  }

  private emit(event: WorkstreamLifecycleEvent): void {
    for (const listener of [...(this.byTenant.get(event.tenantId) ?? [])]) {
      try {
        listener(event);
      } catch (err) {
        this.logger.warn({ err, tenantId: event.tenantId, type: event.type }, 'lifecycle listener threw');
      }
    }
  }
}
