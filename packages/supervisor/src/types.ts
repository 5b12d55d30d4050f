import type { AbortReason, SessionState, TurnStatus, WireError } from '@turnwarden/protocol';

export interface WorkstreamInfo {
  readonly workstreamId: string;
  readonly tenantId: string;
  /** Minted at each creation of the id (D1). */
  readonly incarnation: string;
}

export interface SendInput {
  readonly tenantId: string;
  readonly workstreamId: string;
  readonly content: string;
  /** Who sent it (T1). */
  readonly principal?: string;
}

export interface TurnResult {
  readonly workstreamId: string;
  readonly generation: number;
  readonly status: TurnStatus;
  readonly finalText?: string;
  readonly abortReason?: AbortReason | 'crash';
  readonly error?: WireError;
  /** Results written by recovery for calls that could not complete (S2). */
  readonly synthesized: number;
  /** True when the worker had to be terminated (L3) or died (T7). */
  readonly workerTerminated: boolean;
}

export interface TurnHandle {
  readonly workstreamId: string;
  readonly generation: number;
  /** Settles when the workstream is idle again (never rejects). */
  readonly done: Promise<TurnResult>;
}

export interface WorkstreamStatus {
  readonly workstreamId: string;
  readonly tenantId: string;
  readonly state: SessionState;
  readonly generation: number;
  /** Structural debt could not be repaired: claims are refused until repaired (S3). */
  readonly cleanupPending: boolean;
  readonly activeTurn?: {
    readonly generation: number;
    readonly idleMs: number;
    readonly lastActivity: string;
    readonly abortReason?: string;
  };
}
