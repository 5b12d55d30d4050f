/**
 * The loopback model server of `turnwarden scale --provider http`, in a process of its own so
 * that serving N streams takes nothing from the runtime's process: `LoopbackServer` with the
 * script player as its fallback (`@turnwarden/providers/loopback`), so every request plays the
 * segment of the turn's script the conversation is at — the first request streams the paced
 * tokens then the tool call, the request after the tool result the paced tokens and `stop`.
 * Sends `{ ready: url }`, then answers `{ id }` with the number of requests served; it ends when
 * its parent disconnects.
 */
import { LoopbackServer, playScripts } from '@turnwarden/providers/loopback';

const server = await LoopbackServer.start({ fallback: playScripts });
process.on('message', (raw) => {
  const m = raw as { id: number };
  process.send?.({ id: m.id, requests: server.exchanges.length });
});
process.on('disconnect', () => {
  void server.close().then(() => process.exit(0));
});
process.send?.({ ready: server.url });
