/**
 * T3 where the turn is not this host's: the principal of the turn the history says runs (its
 * last user row) — from the tail where the store reads one and it holds that row, else from the
 * whole history.
 */
import type { Store } from '@turnwarden/store';

export async function lastUserPrincipal(
  store: Pick<Store, 'readHistory' | 'readHistoryTail'>,
  workstreamId: string,
): Promise<string | undefined> {
  const last = (
    rows: readonly { readonly message: { readonly role: string; readonly principal?: string } }[],
  ) => {
    for (let i = rows.length - 1; i >= 0; i--) {
      const m = rows[i]!.message;
      if (m.role === 'user') return { principal: m.principal };
    }
    return undefined;
  };
  const tail =
    store.readHistoryTail === undefined ? undefined : last(await store.readHistoryTail(workstreamId));
  return (tail ?? last(await store.readHistory(workstreamId)))?.principal;
}
