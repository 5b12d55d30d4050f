/**
 * Bearer tokens (T1): each token maps to a tenant and a principal, configured from a file or the
 * environment. A request without a valid token is 401 before anything else runs; with one, every
 * call it makes names that tenant and principal. Tokens are compared in constant time and never
 * logged.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

export interface TokenGrant {
  readonly token: string;
  readonly tenantId: string;
  readonly principal: string;
}

export interface Caller {
  readonly tenantId: string;
  readonly principal: string;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

export class Tokens {
  private readonly grants: { readonly hash: Buffer; readonly caller: Caller }[];

  constructor(grants: readonly TokenGrant[]) {
    this.grants = grants.map((g) => ({
      hash: digest(g.token),
      caller: { tenantId: g.tenantId, principal: g.principal },
    }));
  }

  /** The caller an `Authorization` header names, or undefined. */
  callerOf(header: string | undefined): Caller | undefined {
    const m = /^Bearer ([^\s]+)$/.exec(header ?? '');
    if (m === null) return undefined;
    const hash = digest(m[1]!);
    let found: Caller | undefined;
    // Every grant is compared, so the time does not say which one matched.
    for (const g of this.grants) if (timingSafeEqual(g.hash, hash)) found = g.caller;
    return found;
  }

  get size(): number {
    return this.grants.length;
  }
}
