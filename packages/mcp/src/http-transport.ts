/**
 * The Streamable HTTP client transport, with one gap closed: a request whose response stream
 * ends before the answer (the server died, the connection dropped) must fail, not wait forever.
 * The SDK's transport reports such an end through `onRequestStreamEnd`, but the client's request
 * path does not ask for it; this transport asks for it on every request it sends, and when the
 * stream of a still-unanswered request ends, it answers that request itself with a JSON-RPC error
 * (`STREAM_LOST`) and reports the loss (`onLost`), so the connection is replaced for the next call.
 */
import {
  isJSONRPCErrorResponse,
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  type JSONRPCMessage,
  type MessageExtraInfo,
  type RequestId,
  StreamableHTTPClientTransport,
  type StreamableHTTPClientTransportOptions,
} from '@modelcontextprotocol/client';

/** The JSON-RPC error code of a request whose response stream ended before its answer. */
export const STREAM_LOST = -32_098;

type SendOptions = Parameters<StreamableHTTPClientTransport['send']>[1];
type OnMessage = (message: JSONRPCMessage, extra?: MessageExtraInfo) => void;

export class GuardedHttpTransport extends StreamableHTTPClientTransport {
  /** Requests sent and not yet answered. */
  private readonly unanswered = new Set<RequestId>();
  private deliver: OnMessage | undefined;

  constructor(
    url: URL,
    options: StreamableHTTPClientTransportOptions,
    private readonly onLost: (reason: string) => void,
  ) {
    super(url, options);
    // The base class declares `onmessage` as an own field and calls it for every message it
    // receives: make it an accessor that stores each handler wrapped, so that every answer is
    // noted before the client sees it.
    Object.defineProperty(this, 'onmessage', {
      configurable: true,
      enumerable: true,
      get: () => this.deliver,
      set: (handler: OnMessage | undefined) => {
        this.deliver =
          handler === undefined
            ? undefined
            : (message, extra) => {
                if (
                  (isJSONRPCResultResponse(message) || isJSONRPCErrorResponse(message)) &&
                  message.id !== undefined
                ) {
                  this.unanswered.delete(message.id);
                }
                handler(message, extra);
              };
      },
    });
  }

  override async send(message: JSONRPCMessage, options?: SendOptions): Promise<void> {
    if (!isJSONRPCRequest(message)) return super.send(message, options);
    const id = message.id;
    this.unanswered.add(id);
    const forget = () => this.unanswered.delete(id);
    options?.requestSignal?.addEventListener('abort', forget, { once: true });
    const onRequestStreamEnd = () => {
      options?.onRequestStreamEnd?.();
      if (!this.unanswered.delete(id)) return;
      const reason = 'the connection to the server was lost before it answered';
      this.onLost(reason);
      this.deliver?.({ jsonrpc: '2.0', id, error: { code: STREAM_LOST, message: reason } });
    };
    try {
      await super.send(message, { ...options, onRequestStreamEnd });
    } catch (e) {
      forget();
      throw e;
    }
  }
}
