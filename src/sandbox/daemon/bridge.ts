/**
 * Egress bridge: the sandbox has no network but loopback, so HTTP(S) clients are pointed at a
 * proxy on 127.0.0.1:<port>; each TCP connection accepted there is piped to the host egress
 * proxy's Unix socket, which the runner bind-mounts into the sandbox.
 */
import { connect, createServer, type Server } from 'node:net';

export async function startEgressBridge(host: string, port: number, proxySocket: string): Promise<Server> {
  // noDelay: bytes are relayed as they come (Nagle would hold small writes for the peer's delayed ACK).
  const server = createServer({ noDelay: true }, (client) => {
    const upstream = connect(proxySocket);
    client.pipe(upstream);
    upstream.pipe(client);
    const close = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close);
    upstream.on('error', close);
    client.on('close', close);
    upstream.on('close', close);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}
