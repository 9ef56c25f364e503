/**
 * The socket tunnel's runner end: runner-side Unix sockets (the credential broker's, the one-host
 * egress proxy of one git operation) reach a short-lived Pod without any network. One Kubernetes
 * exec stream (the transport the daemon relay uses: relay.ts) runs the image's tunnel program
 * (src/sandbox/daemon/tunnel.ts) in the Pod; it listens where this end's CONFIG says and carries
 * each accepted connection back as frames (src/sandbox/daemon/tunnel-frames.ts). This end
 * connects each to a runner-side socket, and only to the sockets of this operation: a listener
 * tag it did not configure, a connection id the Pod never opened, a frame over the limit or more
 * connections than MAX_CONNECTIONS are refused (and counted). The Pod's NetworkPolicy stays
 * deny-all.
 *
 * What the Pod end says is not trusted for memory (issue #42 item 7): an ACK advances a
 * connection's window only over bytes this end really sent on it (more ends the tunnel), and no
 * runner socket is read while the stream toward the Pod is behind (the exec stream's stdin holds
 * its high-water mark: exec-stream.ts stops reading it while the WebSocket holds SEND_HIGH_WATER
 * unsent), so a Pod end that acknowledges and never reads makes this end hold at most about
 * HELD_BOUND bytes (counters.peakHeld says the most it held).
 *
 * The runner-side sockets of a directory (EphemeralBind.sockets) are reached through a
 * descriptor of the directory opened O_NOFOLLOW (as the bubblewrap driver's relays do), never by
 * resolving its path again.
 */
import { constants as fsConstants } from 'node:fs';
import { open, readdir, lstat, readFile, type FileHandle } from 'node:fs/promises';
import { connect } from 'node:net';
import path from 'node:path';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import type { ExecApi as Exec, ExecSocket } from './exec-stream.js';
import { ServiceError } from '../../core/errors.js';
import { FRAME, FrameReader, MAX_CONNECTIONS, Mux, frame, type MuxStats, type TunnelConfig } from '../daemon/tunnel-frames.js';
import { SANDBOX_PROXY_ENV, SANDBOX_PROXY_PORT } from '../proxy-env.js';

export const IN_TUNNEL = '/opt/atelier/daemon/tunnel.js';
/**
 * Where runner sockets and files go in a short-lived Pod: the Pod's own /dev/shm (a memory
 * filesystem private to the Pod, writable by the workspace user; nothing reaches a disk or the
 * workspace's claim, which the workspace's own Pod shares). The image's root is not the runner's
 * to change.
 */
export const POD_RUN_DIR = '/dev/shm/atelier';
export const IN_CREDHELPER = '/opt/atelier/daemon/credhelper.js';
/** As under bubblewrap: the operation's proxy at 127.0.0.1:3128 inside, and the variables pointing at it. */
export const TUNNEL_PROXY_PORT = SANDBOX_PROXY_PORT;
export const TUNNEL_PROXY_ENV = SANDBOX_PROXY_ENV;
/** Largest file carried in (a CA bundle is ~200 KB). */
export const MAX_TUNNEL_FILE = 1024 * 1024;

/**
 * The most bytes toward the Pod this end holds while the Pod end reads nothing, whatever it
 * acknowledges: the exec stream's SEND_HIGH_WATER, the stdin pipe's buffer and one socket read
 * (64 KiB) per connection past the moment the stream said it was behind, with slack.
 */
export const HELD_BOUND = 4 * 1024 * 1024;

/** MuxStats: DATA bytes sent toward the Pod and acknowledged, stream pauses, DATA dropped after a CLOSE. */
export interface TunnelCounters extends MuxStats {
  opened: number;
  refusedTag: number;
  refusedId: number;
  refusedLimit: number;
  /** The most bytes toward the Pod held in the runner at once (the stream's buffer and the WebSocket's unsent bytes). */
  peakHeld: number;
  /** Why the tunnel ended early (a protocol violation), if it did. */
  failure?: string;
}

/** What one operation lets through: listener tag → the runner-side socket path. */
export interface TunnelPlan {
  config: TunnelConfig;
  targets: Map<string, string>;
  /** Directory descriptors held while the tunnel lives. */
  dirs: FileHandle[];
}

/** The tunnel's runner end over any pair of streams (the exec stream's stdout and stdin; tests give their own). */
export class TunnelEnd {
  readonly counters: TunnelCounters = { opened: 0, refusedTag: 0, refusedId: 0, refusedLimit: 0, sent: 0, acked: 0, peakHeld: 0, streamPauses: 0, dropped: 0 };
  private readonly mux: Mux;
  private readonly reader: FrameReader;
  private readyWait: { resolve: () => void; reject: (e: Error) => void } | undefined;
  private closed = false;

  constructor(
    private readonly fromPod: Readable,
    private readonly toPod: Writable,
    private readonly targets: ReadonlyMap<string, string>,
    private readonly onEnd: () => void = () => undefined,
    /** Bytes the transport under toPod holds unsent (the exec WebSocket's bufferedAmount). */
    private readonly unsent: () => number = () => 0,
  ) {
    this.mux = new Mux((b) => this.toPodWrite(b), (reason) => this.fail(reason), this.counters);
    toPod.on('drain', () => this.mux.drained());
    this.reader = new FrameReader((type, id, payload) => this.onFrame(type, id, payload));
    fromPod.on('data', (chunk: Buffer) => {
      if (this.closed) return;
      try {
        this.reader.push(chunk);
      } catch (err) {
        this.fail(err instanceof Error ? err.message : String(err));
      }
    });
    fromPod.on('end', () => this.fail('the tunnel stream ended'));
    fromPod.on('error', (err) => this.fail(err.message));
  }

  /** Sends the CONFIG and waits for the Pod end's READY. */
  start(config: TunnelConfig, timeoutMs = 60_000): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new ServiceError('UNAVAILABLE', 'the socket tunnel in the pod did not start in time')), timeoutMs);
      this.readyWait = {
        resolve: () => (clearTimeout(t), resolve()),
        reject: (e) => (clearTimeout(t), reject(e)),
      };
      this.toPod.write(frame(FRAME.CONFIG, 0, JSON.stringify(config)));
    });
  }

  /** Bytes toward the Pod held in the runner now. */
  get held(): number {
    return this.toPod.writableLength + ((this.toPod as unknown as Partial<Readable>).readableLength ?? 0) + this.unsent();
  }

  private toPodWrite(b: Buffer): boolean {
    if (this.closed) return true;
    const ok = this.toPod.write(b);
    const held = this.held;
    if (held > this.counters.peakHeld) this.counters.peakHeld = held;
    return ok;
  }

  private onFrame(type: number, id: number, payload: Buffer): void {
    switch (type) {
      case FRAME.READY: {
        const r = JSON.parse(payload.toString('utf8')) as { ok?: boolean; error?: string };
        if (r.ok) this.readyWait?.resolve();
        else this.readyWait?.reject(new ServiceError('FAILED_PRECONDITION', `the socket tunnel in the pod could not start: ${r.error ?? 'unknown'}`));
        return;
      }
      case FRAME.OPEN: {
        if (!this.mux.isNew(id)) {
          // Ids only grow: one already seen is a replay (a second stream on a connection).
          this.counters.refusedId++;
          return this.fail(`connection id ${id} opened twice (or out of order)`);
        }
        this.mux.note(id);
        const tag = payload.toString('utf8');
        const target = this.targets.get(tag);
        if (target === undefined) {
          this.counters.refusedTag++;
          return this.mux.refuse(id, 'not a socket of this operation');
        }
        if (this.mux.conns.size >= MAX_CONNECTIONS) {
          this.counters.refusedLimit++;
          return this.mux.refuse(id, 'too many connections');
        }
        this.counters.opened++;
        this.mux.attach(id, connect({ path: target, allowHalfOpen: true }));
        return;
      }
      case FRAME.DATA:
      case FRAME.ACK:
      case FRAME.CLOSE:
        if (!this.mux.known(id)) {
          // An id the Pod never opened: nothing of it reaches a runner socket.
          this.counters.refusedId++;
          if (type !== FRAME.CLOSE) this.mux.refuse(id, 'unknown connection');
          return;
        }
        if (type === FRAME.DATA) return this.mux.onData(id, payload);
        if (type === FRAME.ACK) return this.mux.onAck(id, payload);
        return this.mux.onClose(id);
      default:
        return this.fail(`unexpected frame type ${type} from the pod`);
    }
  }

  private fail(reason: string): void {
    if (this.closed) return;
    this.counters.failure ??= reason;
    this.readyWait?.reject(new ServiceError('UNAVAILABLE', `the socket tunnel ended: ${reason}`));
    this.close();
  }

  /** Whether the tunnel has ended (closed here or there). */
  get ended(): boolean {
    return this.closed;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.mux.destroyAll();
    this.toPod.end();
    this.fromPod.destroy();
    this.onEnd();
  }
}

/**
 * The tunnel of one short-lived Pod: what its binds and network ask for, as listeners in the Pod
 * (under POD_RUN_DIR) and runner-side targets.
 *   sockets: every socket now in the bound directory, at <target>/<name> in the Pod;
 *   proxy:   127.0.0.1:<port> in the Pod → the operation's proxy socket;
 *   files:   read-only regular files anyone may read (opened O_NOFOLLOW), written at their target.
 * Targets must lie under POD_RUN_DIR (the Pod's own writable directory; the image's root is not
 * the runner's to change): refused by name otherwise.
 */
export async function planTunnel(args: {
  sockets: Array<{ source: string; target: string }>;
  files: Array<{ source: string; target: string }>;
  proxy?: { socket: string; port: number };
}): Promise<TunnelPlan> {
  const plan: TunnelPlan = { config: { listen: [], files: [] }, targets: new Map(), dirs: [] };
  const under = (target: string): void => {
    const t = path.posix.normalize(target);
    if (!t.startsWith(POD_RUN_DIR + '/') || t !== target) {
      throw new ServiceError('NOT_SUPPORTED', `binds: ${target}: in a Kubernetes Pod, runner sockets and files go under ${POD_RUN_DIR}/ (the Pod's own directory; see Executor.ephemeralLayout)`, { field: 'binds', target });
    }
  };
  try {
    for (const [i, s] of args.sockets.entries()) {
      under(s.target);
      const dir = await open(s.source, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY | fsConstants.O_NOFOLLOW);
      plan.dirs.push(dir);
      const via = `/proc/self/fd/${dir.fd}`;
      for (const name of await readdir(via)) {
        if (!(await lstat(path.join(via, name))).isSocket()) continue;
        const tag = `s${i}/${name}`;
        plan.targets.set(tag, path.join(via, name));
        plan.config.listen.push({ tag, path: path.posix.join(s.target, name) });
      }
    }
    for (const f of args.files) {
      under(f.target);
      const fh = await open(f.source, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
      try {
        const st = await fh.stat();
        if (!st.isFile() || !(st.mode & 0o004) || st.size > MAX_TUNNEL_FILE) {
          throw new ServiceError('NOT_SUPPORTED', `binds: ${f.target}: only a regular file anyone may read, at most ${MAX_TUNNEL_FILE} bytes, is carried into a Pod`, { field: 'binds', target: f.target });
        }
        plan.config.files.push({ path: f.target, b64: (await readFile(fh)).toString('base64'), mode: 0o444 });
      } finally {
        await fh.close();
      }
    }
    if (args.proxy) {
      plan.targets.set('proxy', args.proxy.socket);
      plan.config.listen.push({ tag: 'proxy', port: args.proxy.port });
    }
    return plan;
  } catch (err) {
    for (const d of plan.dirs) await d.close().catch(() => undefined);
    throw err;
  }
}

/**
 * Opens the tunnel in `pod` over an exec stream and waits until it listens. `onEnd` is called
 * once when the tunnel ends after that (closed here, the stream dropped, the Pod end gone).
 */
export async function openTunnel(exec: Exec, namespace: string, pod: string, plan: TunnelPlan, onEnd: (end: TunnelEnd) => void = () => undefined): Promise<TunnelEnd> {
  const toPod = new PassThrough();
  const fromPod = new PassThrough();
  const stderr = new PassThrough();
  let errText = '';
  stderr.on('data', (d: Buffer) => void (errText.length < 2048 && (errText += d.toString())));
  let ws: ExecSocket | undefined;
  let started = false;
  const end: TunnelEnd = new TunnelEnd(
    fromPod,
    toPod,
    plan.targets,
    () => {
      ws?.close();
      if (started) onEnd(end);
    },
    () => ws?.bufferedAmount ?? 0,
  );
  const sock = await exec.exec(namespace, pod, 'main', ['node', IN_TUNNEL], fromPod, stderr, toPod, false, (status) => {
    if (status?.status !== 'Success') fromPod.destroy(new Error(`tunnel exited: ${status?.message ?? ''} ${errText.trim()}`));
    else fromPod.end();
  }).catch((err: unknown) => {
    throw new ServiceError('UNAVAILABLE', `cannot open the socket tunnel in pod ${pod}: ${err instanceof Error ? err.message : String(err)}`, { pod });
  });
  ws = sock;
  sock.on('close', () => fromPod.end());
  try {
    await end.start(plan.config);
  } catch (err) {
    end.close();
    throw err;
  }
  started = true;
  // Ended while READY was on its way here: said now, as it would have been after.
  if (end.ended) onEnd(end);
  return end;
}
