/**
 * T2: a workstream is its tenant's id and its own; inside the runtime and in the store it is
 * named by its key, `<tenant>/<id>` (`workstreamKey`). What leaves the runtime names it by the id
 * the caller gave: an error raised inside with the key in its message or its details is given
 * the id — thrown (`outward`) or carried as data (`outwardWire`: a turn result, the journal gate's
 * persistence status).
 */
import { isTurnwardenError, TurnwardenError, type WireError } from '@turnwarden/protocol';

export function outward(e: unknown, key: string, id: string): unknown {
  if (!isTurnwardenError(e)) return e;
  const inDetails = e.details?.workstreamId === key;
  if (!inDetails && !e.message.includes(key)) return e;
  return new TurnwardenError(e.code, e.message.replaceAll(key, id), {
    retryable: e.retryable,
    cause: e,
    ...(e.details === undefined
      ? {}
      : { details: inDetails ? { ...e.details, workstreamId: id } : e.details }),
  });
}

export function outwardWire(w: WireError, key: string, id: string): WireError {
  const inDetails = w.details?.workstreamId === key;
  if (!inDetails && !w.message.includes(key)) return w;
  return {
    ...w,
    message: w.message.replaceAll(key, id),
    ...(inDetails ? { details: { ...w.details, workstreamId: id } } : {}),
  };
}
