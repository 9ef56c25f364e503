/**
 * Relay mode (preview URLs, docs/workspaces.md "Preview URLs"): a fresh connection to the daemon's
 * socket whose first and only request is
 *
 *   {"id": 1, "method": "relay", "params": {"port": 5173}}
 *
 * becomes a byte pipe to 127.0.0.1:<port> (or [::1]:<port> when nothing listens on IPv4) inside
 * the sandbox's network namespace. The daemon answers one line, {"id": 1, "result": {"relayed":
 * true, "address": "127.0.0.1"}} or an error reply, and from then on relays raw bytes both ways
 * until either side closes; no JSON and no base64 on the data path. The runner sends nothing after
 * the request line until it has read the reply.
 *
 * Only loopback, only the one port asked for, never the egress bridge's port (that would reach the
 * host's egress proxy). The daemon runs as the workspace user: the relay can reach nothing a
 * process of the workspace could not reach itself.
 */
import { connect, type Socket } from 'node:net';
import { DaemonError, encodeMessage, type RequestId } from './protocol.js';

/** How long a relay's side may take to hand its last bytes over after the other side closed. */
const RELAY_LINGER_MS = 10_000;

export interface RelayParams {
  port: number;
}

export interface RelayReply {
  relayed: true;
  address: '127.0.0.1' | '::1';
}

export function relayPortProblem(port: unknown, forbidden: number[]): string | null {
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) return 'port: must be an integer from 1 to 65535';
  if (forbidden.includes(port)) return `port: ${port} is the sandbox's egress bridge, not a workspace server`;
  return null;
}

function dial(host: string, port: number, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host, port, noDelay: true });
    const timer = setTimeout(() => {
      s.destroy();
      reject(Object.assign(new Error('connect timed out'), { code: 'ETIMEDOUT' }));
    }, timeoutMs);
    s.once('connect', () => {
      clearTimeout(timer);
      s.removeAllListeners('error');
      resolve(s);
    });
    s.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/**
 * Serves a relay request on `client` (the daemon's side of the runner's connection, paused, with
 * nothing read past the request line).
 */
export async function serveRelay(client: Socket, id: RequestId, params: unknown, opts: { forbiddenPorts: number[]; connectTimeoutMs?: number }): Promise<void> {
  const port = (params as Partial<RelayParams> | undefined)?.port;
  const problem = relayPortProblem(port, opts.forbiddenPorts);
  const fail = (err: DaemonError): void => {
    client.end(encodeMessage({ id, error: err.toBody() }));
  };
  if (problem) return fail(new DaemonError('INVALID_ARGUMENT', problem, { field: 'port' }));
  let upstream: Socket | undefined;
  let address: RelayReply['address'] = '127.0.0.1';
  try {
    upstream = await dial('127.0.0.1', port as number, opts.connectTimeoutMs ?? 5_000);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ECONNREFUSED') {
      return fail(new DaemonError('FAILED_PRECONDITION', `port: nothing answered on port ${port} inside the workspace (${(err as NodeJS.ErrnoException).code ?? 'error'})`, { field: 'port', port }));
    }
    try {
      upstream = await dial('::1', port as number, opts.connectTimeoutMs ?? 5_000);
      address = '::1';
    } catch {
      return fail(new DaemonError('FAILED_PRECONDITION', `port: nothing listens on port ${port} inside the workspace (127.0.0.1 and ::1 refused the connection)`, { field: 'port', port }));
    }
  }
  if (client.destroyed) {
    upstream.destroy();
    return;
  }
  const reply: RelayReply = { relayed: true, address };
  client.write(encodeMessage({ id, result: reply }));
  const teardown = (): void => {
    client.destroy();
    upstream.destroy();
  };
  // One side closed cleanly: the other is ended (the pipe did) and destroyed only once it has
  // written what it holds. A destroy at once cut the last bytes of an answer still queued toward a
  // slow reader (the fresh-clone run lost 832 bytes of 64 MiB that way).
  const finish = (other: Socket): void => {
    if (other.destroyed) return;
    other.end();
    if (other.writableFinished) return void other.destroy();
    other.once('finish', () => other.destroy());
    setTimeout(() => other.destroy(), RELAY_LINGER_MS).unref();
  };
  for (const [s, other] of [[client, upstream], [upstream, client]] as const) {
    s.on('error', teardown);
    s.on('close', (hadError: boolean) => (hadError ? teardown() : finish(other)));
  }
  // Half-closes pass through (an HTTP client may end its side and still read the answer).
  client.pipe(upstream);
  upstream.pipe(client);
  client.resume();
}
