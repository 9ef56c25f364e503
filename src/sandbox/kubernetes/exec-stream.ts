/**
 * Kubernetes exec streams, the runner's own client (issue #42 item 7): the same call as the
 * official client's Exec.exec (@kubernetes/client-node), the same WebSocket sub-protocols
 * (v5.channel.k8s.io, v4.channel.k8s.io: one channel byte, then the bytes of stdin 0, stdout 1,
 * stderr 2, the status 3 that ends the session, 255 a half-close), with what the official one
 * lacks:
 *
 *   - back-pressure both ways: a stdout or stderr write that returns false pauses the
 *     WebSocket (ws's pause(), which its receiver's 'drain' respects) until that stream drains (so the Pod waits, not the runner's
 *     memory); stdin is read only while the WebSocket holds at most SEND_HIGH_WATER bytes not yet
 *     on the wire (the official client sends every chunk as it comes);
 *   - containment: every frame the stream carries (its payload is the Pod's) is handled inside a
 *     try: an empty, text or unknown-channel frame is dropped and counted, a status that is not
 *     JSON ends the session as a failure, a half-close names one of this session's own streams
 *     (never the runner's process.stdout, as the official handler's default streams do), frames
 *     after the status are dropped, a frame over MAX_EXEC_FRAME ends the session (the WebSocket
 *     library refuses it before buffering more). Nothing of it reaches an uncaught throw.
 *
 * The `ws` package is the one the official client itself depends on (resolved from its
 * location), so the connection, TLS and credentials are the kubeconfig's exactly as there.
 */
import { createRequire } from 'node:module';
import querystring from 'node:querystring';
import type { Readable, Writable } from 'node:stream';
import type { KubeConfig } from '@kubernetes/client-node';

/** Largest frame taken from the API server (kubelets copy stream output in 32 KiB pieces). */
export const MAX_EXEC_FRAME = 1024 * 1024;
/** Stdin is read while the WebSocket holds at most this much not yet written to its socket. */
export const SEND_HIGH_WATER = 256 * 1024;
export const EXEC_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'];
const CH = { stdin: 0, stdout: 1, stderr: 2, status: 3, close: 255 } as const;

/** What an exec's status callback is given (a metav1.Status). */
export interface ExecStatus {
  status?: string;
  message?: string;
  reason?: string;
  details?: unknown;
}

/** The WebSocket of one exec session, as callers use it. */
export interface ExecSocket {
  readonly readyState: number;
  readonly bufferedAmount: number;
  readonly protocol: string;
  _socket?: { pause(): void; resume(): void; once(ev: 'drain', cb: () => void): unknown };
  /** Stops reading the socket (the library's own flag: its receiver's 'drain' does not resume it). */
  pause(): void;
  resume(): void;
  close(code?: number, reason?: string): void;
  terminate(): void;
  send(data: Buffer, cb?: (err?: Error) => void): void;
  on(ev: string, cb: (...args: any[]) => void): this; // eslint-disable-line @typescript-eslint/no-explicit-any
  once(ev: string, cb: (...args: any[]) => void): this; // eslint-disable-line @typescript-eslint/no-explicit-any
  off(ev: string, cb: (...args: any[]) => void): this; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** The exec call the driver makes (the official client's Exec.exec shape). */
export interface ExecApi {
  exec(namespace: string, pod: string, container: string, command: string[], stdout: Writable | null, stderr: Writable | null, stdin: Readable | null, tty: boolean, statusCallback?: (status: ExecStatus) => void): Promise<ExecSocket>;
}

/** What the runner's exec sessions met (tests and the bench read these). */
export interface ExecCounters {
  sessions: number;
  /** Frames dropped: empty, text, an unknown channel, a half-close of no stream, after the status. */
  dropped: number;
  /** Sessions ended for a broken protocol (a status that is not JSON, a frame over the limit). */
  broken: number;
  /** Times the WebSocket's socket was paused because a stdout/stderr consumer was behind. */
  readPauses: number;
  /** Times stdin was paused because the WebSocket held SEND_HIGH_WATER bytes. */
  sendPauses: number;
  /** The most bytes one session's WebSocket held unsent at once. */
  peakUnsent: number;
}

type WsCtor = new (url: string, protocols: string[], opts: Record<string, unknown>) => ExecSocket;

function loadWs(): WsCtor {
  // The `ws` the official client uses (its own dependency), not one this package would have to name.
  const req = createRequire(import.meta.resolve('@kubernetes/client-node'));
  return req('ws') as WsCtor;
}

export class KubeExec implements ExecApi {
  readonly counters: ExecCounters = { sessions: 0, dropped: 0, broken: 0, readPauses: 0, sendPauses: 0, peakUnsent: 0 };
  private readonly WebSocket: WsCtor;

  constructor(private readonly kc: KubeConfig) {
    this.WebSocket = loadWs();
  }

  async exec(namespace: string, pod: string, container: string, command: string[], stdout: Writable | null, stderr: Writable | null, stdin: Readable | null, tty: boolean, statusCallback?: (status: ExecStatus) => void): Promise<ExecSocket> {
    const cluster = this.kc.getCurrentCluster();
    if (!cluster) throw new Error('No cluster is defined.');
    const query = querystring.stringify({ stdout: stdout != null, stderr: stderr != null, stdin: stdin != null, tty, command, container });
    const server = cluster.server.replace(/^http/, 'ws').replace(/\/+$/, '');
    const url = `${server}/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(pod)}/exec?${query}`;
    const opts: Record<string, unknown> = {};
    await this.kc.applyToHTTPSOptions(opts);
    const ws = new this.WebSocket(url, EXEC_PROTOCOLS, { ...opts, maxPayload: MAX_EXEC_FRAME, perMessageDeflate: false });
    this.counters.sessions++;
    // Never an unheard 'error' (one during the handshake rejects below; later ones end the session).
    ws.on('error', () => undefined);
    await new Promise<void>((resolve, reject) => {
      const fail = (err: Error): void => reject(err);
      ws.once('error', fail);
      ws.once('unexpected-response', (_req: unknown, res: { statusCode?: number; on(ev: string, cb: (d?: Buffer) => void): unknown }) => {
        // The API server's refusal (a Status body): its message, bounded.
        let body = '';
        res.on('data', (d?: Buffer) => void (body.length < 4096 && (body += d?.toString() ?? '')));
        res.on('end', () => {
          let message = body.slice(0, 2048);
          try {
            message = (JSON.parse(body) as { message?: string }).message ?? message;
          } catch {
            /* not a Status */
          }
          reject(new Error(`Unexpected server response: ${res.statusCode}${message ? `: ${message}` : ''}`));
          ws.terminate();
        });
        res.on('error', () => reject(new Error(`Unexpected server response: ${res.statusCode}`)));
      });
      ws.once('open', () => {
        ws.off('error', fail);
        resolve();
      });
    });
    new Session(ws, this.counters, stdout, stderr, stdin, statusCallback);
    return ws;
  }
}

/** One exec session's frames, both ways. */
class Session {
  private finished = false;
  /** The writables the WebSocket's socket waits for (it is paused while any is behind). */
  private readonly behind = new Set<Writable>();
  private readonly onStdin = (chunk: Buffer | string): void => this.send(chunk);
  private readonly onStdinEnd = (): void => {
    if (this.ws.readyState !== 1) return;
    // v5: a half-close of stdin; v4 has none (stdin ends with the session, as the official client does).
    if (this.ws.protocol === 'v5.channel.k8s.io') this.ws.send(Buffer.from([CH.close, CH.stdin]));
    else this.ws.close();
  };

  constructor(
    private readonly ws: ExecSocket,
    private readonly counters: ExecCounters,
    private readonly stdout: Writable | null,
    private readonly stderr: Writable | null,
    private readonly stdin: Readable | null,
    private readonly statusCallback: ((status: ExecStatus) => void) | undefined,
  ) {
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      try {
        this.onMessage(data, isBinary);
      } catch (err) {
        this.broken(err instanceof Error ? err.message : String(err));
      }
    });
    // After open, an error (a frame over the limit, a reset) is followed by 'close'.
    ws.on('error', (err: Error) => this.broken(err.message));
    ws.on('close', () => this.closed());
    if (stdin) {
      stdin.on('data', this.onStdin);
      stdin.on('end', this.onStdinEnd);
      stdin.on('error', () => ws.close());
    }
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    if (this.finished || !isBinary || data.length === 0) return void this.counters.dropped++;
    const ch = data[0]!;
    const body = data.subarray(1);
    switch (ch) {
      case CH.stdout:
        return this.write(this.stdout, body);
      case CH.stderr:
        return this.write(this.stderr, body);
      case CH.status: {
        let status: ExecStatus;
        try {
          const parsed: unknown = JSON.parse(body.toString('utf8'));
          if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
          status = parsed as ExecStatus;
        } catch {
          return this.broken(`a status that is not a JSON Status (${body.length} bytes)`);
        }
        return this.finish(status);
      }
      case CH.close: {
        // v5: [255, n] ends stream n (the server's side of it).
        const n = data[1];
        if (this.ws.protocol !== 'v5.channel.k8s.io' || data.length !== 2) return void this.counters.dropped++;
        if (n === CH.stdout) return void endQuietly(this.stdout);
        if (n === CH.stderr) return void endQuietly(this.stderr);
        if (n === CH.stdin) return this.stopStdin();
        return void this.counters.dropped++;
      }
      default:
        this.counters.dropped++;
    }
  }

  /** Bytes for the caller's stream; the socket waits while that stream is behind. */
  private write(w: Writable | null, body: Buffer): void {
    if (!w || body.length === 0) return;
    if (w.writableEnded || w.destroyed) return void this.counters.dropped++;
    if (w.write(body) || this.behind.has(w)) return;
    this.behind.add(w);
    this.counters.readPauses++;
    this.ws.pause();
    const caughtUp = (): void => {
      w.off('drain', caughtUp);
      w.off('close', caughtUp);
      w.off('finish', caughtUp);
      this.behind.delete(w);
      if (this.behind.size === 0 && this.ws.readyState === 1) this.ws.resume();
    };
    w.on('drain', caughtUp);
    w.on('close', caughtUp);
    w.on('finish', caughtUp);
  }

  private send(chunk: Buffer | string): void {
    if (this.ws.readyState !== 1) return;
    const b = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk;
    const framed = Buffer.allocUnsafe(b.length + 1);
    framed[0] = CH.stdin;
    b.copy(framed, 1);
    this.ws.send(framed);
    const unsent = this.ws.bufferedAmount;
    if (unsent > this.counters.peakUnsent) this.counters.peakUnsent = unsent;
    if (unsent <= SEND_HIGH_WATER || !this.stdin || this.stdin.isPaused()) return;
    this.counters.sendPauses++;
    this.stdin.pause();
    const check = (): void => {
      if (this.ws.readyState !== 1) return;
      if (this.ws.bufferedAmount > SEND_HIGH_WATER && this.ws._socket) return void this.ws._socket.once('drain', check);
      this.stdin?.resume();
    };
    if (this.ws._socket) this.ws._socket.once('drain', check);
    else setImmediate(check);
  }

  private finish(status: ExecStatus): void {
    if (this.finished) return;
    this.finished = true;
    this.stopStdin();
    // As the official client: the status ends stdout and stderr, then the session closes.
    endQuietly(this.stdout);
    endQuietly(this.stderr);
    try {
      this.statusCallback?.(status);
    } finally {
      this.ws.close();
    }
  }

  private broken(reason: string): void {
    if (this.finished) return;
    this.counters.broken++;
    this.finish({ status: 'Failure', reason: 'StreamBroken', message: `the exec stream broke its protocol: ${reason}` });
    this.ws.terminate();
  }

  private stopStdin(): void {
    if (!this.stdin) return;
    this.stdin.off('data', this.onStdin);
    this.stdin.off('end', this.onStdinEnd);
  }

  private closed(): void {
    this.stopStdin();
    this.finished = true;
    this.behind.clear();
  }
}

function endQuietly(w: Writable | null): void {
  if (w && !w.writableEnded && !w.destroyed && w !== (process.stdout as Writable) && w !== (process.stderr as Writable)) w.end();
}
