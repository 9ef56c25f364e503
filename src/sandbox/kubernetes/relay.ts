/**
 * The runner's door to a Pod's daemon: a Unix socket in the runner's own run directory (0700,
 * root's) whose every connection is one Kubernetes exec stream running the image's stdio bridge
 * (src/sandbox/daemon/stdio-bridge.ts) in the Pod. So the DaemonClient, and the daemon's
 * newline-delimited protocol, are the same as under bubblewrap; the handle's socketPath is this
 * relay. One connection (one WebSocket) is open per workspace while the runner uses it.
 */
import { chmod, mkdir, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { PassThrough } from 'node:stream';
import type { ExecApi as Exec } from './exec-stream.js';
import { IN_BRIDGE, IN_SOCKET } from './manifests.js';

/** How long a relay connection whose exec stream ended may take to hand its last bytes over. */
const LINGER_MS = 30_000;

export class ExecRelay {
  private readonly open = new Set<Socket>();
  private constructor(
    readonly socketPath: string,
    private readonly server: Server,
  ) {}

  /** Streams opened so far (for the bench's per-workspace figures). */
  static streamsOpened = 0;

  static async listen(socketPath: string, exec: Exec, namespace: string, pod: string): Promise<ExecRelay> {
    await mkdir(socketPath.slice(0, socketPath.lastIndexOf('/')), { recursive: true, mode: 0o700 });
    await rm(socketPath, { force: true });
    let relay: ExecRelay | undefined;
    const server = createServer((sock) => {
      relay!.open.add(sock);
      sock.on('close', () => relay!.open.delete(sock));
      ExecRelay.streamsOpened++;
      const stderr = new PassThrough();
      let errText = '';
      stderr.on('data', (d: Buffer) => void (errText.length < 4096 && (errText += d.toString())));
      exec
        .exec(namespace, pod, 'main', ['node', IN_BRIDGE, IN_SOCKET], sock, stderr, sock, false)
        .then((ws) => {
          // The session ended (its status ends `sock`'s writing side): what `sock` still holds
          // reaches the relay's client first (a destroy here cut a preview answer's last bytes);
          // a client that never reads them is let go after LINGER_MS.
          ws.on('close', () => {
            sock.end();
            if (sock.writableFinished) return void sock.destroy();
            sock.once('finish', () => sock.destroy());
            setTimeout(() => sock.destroy(), LINGER_MS).unref();
          });
          sock.on('close', () => ws.close());
          // The relay's client went away while the stream was opening.
          if (sock.destroyed) ws.close();
        })
        .catch(() => sock.destroy());
      sock.on('error', () => sock.destroy());
    });
    relay = new ExecRelay(socketPath, server);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socketPath, () => resolve());
    });
    await chmod(socketPath, 0o600);
    return relay;
  }

  async close(): Promise<void> {
    for (const s of this.open) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await rm(this.socketPath, { force: true });
  }
}
