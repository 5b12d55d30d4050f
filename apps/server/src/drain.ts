/**
 * The rest of a refused request's body. A request can be answered before its body was read — a
 * body over `bodyLimit`, no token, a bad id — and closing the connection then, with the client
 * still sending, resets it: the client's next write fails (EPIPE, ECONNRESET) and it never reads
 * the answer that was waiting for it. So before such an answer is sent the server reads what is
 * left of the body and discards it, within two bounds: at most `bytes` more (a body whose
 * Content-Length is over `bytes` is not read at all), for at most `ms`.
 * Past either bound it gives up: the answer goes out with `Connection: close` and the connection
 * ends (a client still sending then may see a reset: that is the price of the bound).
 */
import type { IncomingMessage } from 'node:http';

export interface DrainLimits {
  /** Bytes of a refused body read and discarded at most, after the refusal. */
  readonly bytes: number;
  /** How long a refused body is read for at most, in ms. */
  readonly ms: number;
}

export class Drains {
  readonly #limits: DrainLimits;
  /** Drains in progress: the server's close ends them (a trickling client does not hold shutdown). */
  readonly #active = new Set<() => void>();

  constructor(limits: DrainLimits) {
    this.#limits = limits;
  }

  /**
   * Reads and discards the rest of `req`'s body. Resolves true once the body has been read to
   * its end (the connection can carry the answer and stay clean), false when a bound was
   * reached or the server is closing (the connection must close after the answer).
   */
  drain(req: IncomingMessage): Promise<boolean> {
    // Read to its end already (`readableEnded` also covers `inject`'s requests, which have no `complete`).
    if (req.complete || req.readableEnded) return Promise.resolve(true);
    if (req.destroyed) return Promise.resolve(false);
    const { bytes, ms } = this.#limits;
    // A body that declares a length past the bound is not worth reading: give up at once.
    if (Number(req.headers['content-length']) > bytes) return Promise.resolve(false);
    return new Promise((resolve) => {
      let read = 0;
      const finish = (drained: boolean) => {
        clearTimeout(timer);
        req.off('data', onData);
        req.off('end', onEnd);
        req.off('close', onClose);
        this.#active.delete(stop);
        resolve(drained);
      };
      const onData = (chunk: Buffer) => {
        read += chunk.length;
        if (read > bytes) finish(false);
      };
      const onEnd = () => finish(true);
      const onClose = () => finish(req.complete);
      const stop = () => finish(false);
      const timer = setTimeout(stop, ms);
      this.#active.add(stop);
      req.on('data', onData);
      req.on('end', onEnd);
      req.on('close', onClose);
      req.resume();
    });
  }

  /** Drains in progress (the server's close ends them). */
  get inProgress(): number {
    return this.#active.size;
  }

  /** Ends every drain in progress (their answers go out with `Connection: close`). */
  stopAll(): void {
    for (const stop of [...this.#active]) stop();
  }
}
