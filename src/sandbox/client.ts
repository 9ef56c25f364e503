/**
 * Runner-side client of the in-sandbox daemon (protocol in ./daemon/protocol.ts).
 *
 * One connection is shared by all requests to a sandbox and opened on demand: after the daemon
 * restarts or the connection drops, the next request connects again. Requests in flight when a
 * connection drops fail with UNAVAILABLE (the daemon aborts what they started).
 */
import { connect, type Socket } from 'node:net';
import { ERROR_CODES, ServiceError, type ErrorCode } from '../core/errors.js';
import { defineRawText, leaseBytes } from '../core/raw-text.js';
import { SpanKind, inSpan, inTrace } from '../telemetry/tracing.js';
import {
  FrameReader,
  encodeMessage,
  type DaemonMethod,
  type ParamsOf,
  type PingResult,
  type ReplyOf,
} from './daemon/protocol.js';

export interface RequestOptions {
  /** Receives the request's events (stdout/stderr data is base64, see protocol.ts). */
  onEvent?: (event: string, data: unknown) => void;
  /**
   * Aborting sends `cancel` to the daemon and waits (up to cancelGraceMs) for its reply: a
   * partial result resolves the request, anything else rejects with the signal's reason.
   */
  signal?: AbortSignal;
  /** Rejects with DEADLINE_EXCEEDED at once (and cancels the request) when no reply arrives in time. */
  timeoutMs?: number;
}

export interface DaemonClientOptions {
  connectTimeoutMs?: number;
  cancelGraceMs?: number;
}

interface Pending {
  resolve(value: unknown): void;
  reject(err: unknown): void;
  onEvent?: (event: string, data: unknown) => void;
}

/** Bytes read from the daemon's socket at a time (into one reused buffer per connection). */
const READ_CHUNK = 256 * 1024;

export class DaemonClient {
  private socket: Socket | undefined;
  private connecting: Promise<Socket> | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private readonly connectTimeoutMs: number;
  private readonly cancelGraceMs: number;

  constructor(
    readonly socketPath: string,
    opts: DaemonClientOptions = {},
  ) {
    this.connectTimeoutMs = opts.connectTimeoutMs ?? 5_000;
    this.cancelGraceMs = opts.cancelGraceMs ?? 10_000;
  }

  /**
   * Sends one request and resolves with its result. Daemon errors reject as ServiceError. The
   * method name, its params and its reply are checked against DaemonMethods (protocol.ts).
   */
  async request<M extends DaemonMethod>(method: M, params: ParamsOf<M>, opts: RequestOptions = {}): Promise<ReplyOf<M>> {
    // Traced as a child of the call that sent it (src/telemetry/tracing.ts); the method name only, never params.
    if (inTrace()) return inSpan(`daemon ${method}`, { kind: SpanKind.CLIENT, attributes: { 'rpc.system': 'atelier-daemon', 'rpc.method': method } }, () => this.send<ReplyOf<M>>(method, params, opts));
    return this.send<ReplyOf<M>>(method, params, opts);
  }

  private async send<T>(method: string, params: unknown, opts: RequestOptions): Promise<T> {
    opts.signal?.throwIfAborted();
    const socket = await this.connection();
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timers: NodeJS.Timeout[] = [];
      const cleanup = (): void => {
        timers.forEach(clearTimeout);
        opts.signal?.removeEventListener('abort', onAbort);
        this.pending.delete(id);
      };
      const fail = (err: unknown): void => {
        cleanup();
        reject(err);
      };
      const sendCancel = (): void => this.write({ id: this.nextId++, method: 'cancel', params: { id } });
      let cancelError: unknown;
      const onAbort = (): void => {
        if (cancelError !== undefined) return;
        cancelError = opts.signal!.reason;
        sendCancel();
        timers.push(setTimeout(() => fail(cancelError), this.cancelGraceMs));
      };
      this.pending.set(id, {
        resolve: (value) => {
          cleanup();
          resolve(value as T);
        },
        // A CANCELLED reply to our own cancel surfaces as the reason we cancelled for.
        reject: (err) => fail(cancelError !== undefined && isCancelled(err) ? cancelError : err),
        onEvent: opts.onEvent,
      });
      opts.signal?.addEventListener('abort', onAbort);
      if (opts.timeoutMs !== undefined) {
        timers.push(
          setTimeout(() => {
            sendCancel();
            fail(new ServiceError('DEADLINE_EXCEEDED', `sandbox daemon did not answer ${method} in time`));
          }, opts.timeoutMs),
        );
      }
      if (socket.destroyed) return fail(new ServiceError('UNAVAILABLE', 'connection to the sandbox daemon was lost'));
      socket.write(encodeMessage({ id, method, params }));
    });
  }

  ping(timeoutMs = 2_000): Promise<PingResult> {
    return this.request('ping', undefined, { timeoutMs });
  }

  /** The descriptor of the open connection (for SO_PEERCRED, src/sandbox/handoff.ts); undefined when none is open. */
  socketFd(): number | undefined {
    if (!this.socket || this.socket.destroyed) return undefined;
    const fd = (this.socket as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
    return typeof fd === 'number' && fd >= 0 ? fd : undefined;
  }

  /** Whether a connection to the daemon is open now (it closes when the daemon ends). */
  get connected(): boolean {
    return this.socket !== undefined && !this.socket.destroyed;
  }

  /** Closes the connection; requests in flight fail with UNAVAILABLE. */
  close(): void {
    this.socket?.destroy();
    this.socket = undefined;
  }

  private write(msg: { id: number; method: string; params?: unknown }): void {
    if (this.socket && !this.socket.destroyed) this.socket.write(encodeMessage(msg));
  }

  private connection(): Promise<Socket> {
    if (this.socket && !this.socket.destroyed) return Promise.resolve(this.socket);
    this.connecting ??= this.open().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  private open(): Promise<Socket> {
    return new Promise<Socket>((resolve, reject) => {
      // Every read lands in one reused buffer (net's onread): a large reply is copied once into a
      // Buffer of its size, without a new 64 KiB Buffer per read (FrameReader, chunksReused).
      let deliver: ((chunk: Buffer) => void) | undefined;
      const into = Buffer.allocUnsafe(READ_CHUNK);
      const socket = connect({ path: this.socketPath, onread: { buffer: into, callback: (n: number) => (deliver?.(into.subarray(0, n)), true) } });
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new ServiceError('UNAVAILABLE', 'sandbox daemon did not accept the connection in time'));
      }, this.connectTimeoutMs);
      socket.once('error', (err: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        reject(new ServiceError('UNAVAILABLE', 'sandbox daemon is not reachable', { cause: err.code ?? err.message }));
      });
      socket.once('connect', () => {
        clearTimeout(timer);
        socket.removeAllListeners('error');
        deliver = this.attach(socket);
        resolve(socket);
      });
    });
  }

  /** Takes the connection into use; returns what its reads are delivered to. */
  private attach(socket: Socket): (chunk: Buffer) => void {
    this.socket = socket;
    // A large body goes to a pooled block (core/raw-text.ts), given back once escaped onto the wire.
    const reader = new FrameReader(undefined, true, leaseBytes);
    // Containment (docs/architecture.md, "Containing bytes from a workspace"): this runs in the
    // socket's read callback, where a throw would end the runner. Nothing the peer sends may reach
    // one: a frame the reader refuses drops the connection (requests in flight fail UNAVAILABLE),
    // and each message is handled by handle(), which fails only the request it answers.
    const deliver = (chunk: Buffer): void => {
      let messages: Array<{ line: string; body?: Buffer }>;
      try {
        messages = reader.push(chunk);
      } catch {
        socket.destroy();
        return;
      }
      for (const m of messages) this.handle(m.line, m.body);
    };
    socket.on('error', () => socket.destroy());
    socket.on('close', () => {
      if (this.socket === socket) this.socket = undefined;
      const lost = new ServiceError('UNAVAILABLE', 'connection to the sandbox daemon was lost');
      for (const p of [...this.pending.values()]) p.reject(lost);
    });
    return deliver;
  }

  /**
   * One message off the wire, checked before anything believes it: a line that is not JSON, not an
   * object or has no integer id is dropped; a message for no pending request (a cancel's reply, a
   * request that gave up, an id never sent) is dropped; one of the wrong shape fails its request
   * (INTERNAL, naming the daemon). A consumer's callback that throws on an event fails that request
   * only. Never throws.
   */
  private handle(line: string, body?: Buffer): void {
    let msg: unknown;
    try {
      msg = JSON.parse(line);
    } catch {
      return;
    }
    if (!isRecord(msg) || !Number.isSafeInteger(msg.id)) return;
    const pending = this.pending.get(msg.id as number);
    if (!pending) return;
    try {
      if ('event' in msg) {
        if (typeof msg.event !== 'string') throw new MalformedMessage('an event without a name');
        pending.onEvent?.(msg.event, msg.data);
      } else if ('error' in msg) pending.reject(daemonError(msg.error));
      else if ('result' in msg) {
        const spec = msg.body;
        if (body && spec !== undefined) {
          // A raw body (fs.read's content) becomes the field it belongs to, decoded once when first read
          // (core/raw-text.ts: the wire escapes it from the bytes).
          if (!isRecord(spec) || typeof spec.field !== 'string' || (spec.encoding !== 'utf-8' && spec.encoding !== 'base64')) throw new MalformedMessage('a raw body with a bad description');
          if (!isRecord(msg.result)) throw new MalformedMessage('a raw body for a result that is not an object');
          defineRawText(msg.result, spec.field, body, spec.encoding);
        }
        pending.resolve(msg.result);
      } else throw new MalformedMessage('a message that is neither an event, an error nor a result');
    } catch (err) {
      const what = err instanceof MalformedMessage ? err.message : `a message its handler could not take (${err instanceof Error ? err.message : String(err)})`;
      pending.reject(new ServiceError('INTERNAL', `the sandbox daemon sent ${what.slice(0, 300)}`));
      // What the request started stops too (its later messages find no pending request).
      this.write({ id: this.nextId++, method: 'cancel', params: { id: msg.id as number } });
    }
  }
}

class MalformedMessage extends Error {}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const MAX_ERROR_MESSAGE = 64 * 1024;

/**
 * A daemon's error body as a ServiceError. Its codes are a subset of the service's; anything
 * unknown (or a body of the wrong shape) becomes INTERNAL, and the message is bounded. Shared by
 * the relay's first reply (./relay.ts).
 */
export function daemonError(body: unknown): ServiceError {
  const b = isRecord(body) ? body : {};
  const daemonCode = typeof b.code === 'string' ? b.code.slice(0, 64) : 'INTERNAL';
  const code = (Object.hasOwn(ERROR_CODES, daemonCode) ? daemonCode : 'INTERNAL') as ErrorCode;
  const message = typeof b.message === 'string' ? b.message.slice(0, MAX_ERROR_MESSAGE) : 'the sandbox daemon sent an error without a message';
  return new ServiceError(code, message, { ...(isRecord(b.details) ? b.details : {}), daemonCode });
}

function isCancelled(err: unknown): boolean {
  return err instanceof ServiceError && err.details.daemonCode === 'CANCELLED';
}
