/**
 * A TCP proxy in front of the throwaway PostgreSQL cluster, for tests of what the store does when
 * its connections misbehave: `freeze` holds back what the server sends on the latest connection
 * until the client next writes; `close` cuts every connection and refuses new ones.
 */
import net from 'node:net';

/**
 * A loopback proxy in front of the cluster. `freeze()` holds what the server of the connection
 * open now sends (a FATAL, its end) until that connection's client next writes, then delivers
 * it: a statement is sent on a connection the client does not yet know is dead.
 */
export async function freezableProxy(url: string) {
  const target = new URL(url);
  const sockets = new Set<net.Socket>();
  let freezeLatest: (() => void) | undefined;
  let refusing = false;
  const server = net.createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = net.connect(Number(target.port), target.hostname);
    sockets.add(client).add(upstream);
    let held: Buffer[] | undefined; // defined while frozen
    let ended = false;
    upstream.on('data', (b) => (held === undefined ? client.write(b) : held.push(b)));
    upstream.on('close', () => {
      if (held === undefined) client.end();
      else ended = true;
    });
    client.on('data', (b) => {
      if (held !== undefined) {
        for (const h of held) client.write(h);
        held = undefined;
        if (ended) client.end();
      }
      if (!upstream.destroyed) upstream.write(b);
    });
    client.on('close', () => upstream.destroy());
    for (const s of [client, upstream]) s.on('error', () => undefined);
    freezeLatest = () => {
      held = [];
    };
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const proxied = new URL(url);
  proxied.hostname = '127.0.0.1';
  proxied.port = String((server.address() as net.AddressInfo).port);
  return {
    url: proxied.toString(),
    freeze: () => freezeLatest!(),
    /** Cuts every connection; new ones are accepted and dropped at once, until `restore`. */
    cut() {
      refusing = true;
      for (const s of sockets) s.destroy();
      sockets.clear();
    },
    restore() {
      refusing = false;
    },
    close() {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}
