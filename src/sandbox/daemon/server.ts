/**
 * The daemon's socket server and dispatcher. Methods live in a table so that later modules
 * (files, PTYs, search) only add entries; the server owns framing, ids, events, cancellation
 * and error replies.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { unlink } from 'node:fs/promises';
import {
  DaemonError,
  LineSplitter,
  ReplyWithBody,
  bodyHeader,
  encodeMessage,
  type DaemonMessage,
  type DaemonMethod,
  type ReplyOf,
  type RequestId,
} from './protocol.js';
import { serveRelay } from './relay.js';

export interface CallContext {
  /** Aborted when the client cancels this request or its connection closes. */
  signal: AbortSignal;
  /**
   * Sends an event tied to this request. Returns false when the connection's write buffer is
   * full; a producer should then pause until `drained()` resolves.
   */
  emit(event: string, data: unknown): boolean;
  drained(): Promise<void>;
}

export type MethodHandler = (params: unknown, ctx: CallContext) => unknown;
export type MethodTable = Record<string, MethodHandler>;

/**
 * Handlers of some of the methods in protocol.ts's DaemonMethods: each must reply with its
 * method's reply type. Params arrive as `unknown` (they come off a socket) and are validated by
 * the handler. main.ts serves `Handlers<ServedMethod>`, so a declared method without a handler, or
 * a handler replying with the wrong shape, does not compile.
 */
export type Handlers<K extends DaemonMethod> = { [M in K]: (params: unknown, ctx: CallContext) => Reply<ReplyOf<M>> | Promise<Reply<ReplyOf<M>>> };

/** A reply, or a reply with one field sent as a raw body frame (protocol.ts). */
export type Reply<T> = T | (T extends object ? ReplyWithBody<T> : never);

/** Every method but `cancel` and `relay`, which the server answers itself. */
export type ServedMethod = Exclude<DaemonMethod, 'cancel' | 'relay'>;

/** Relay mode (relay.ts): ports a relay may never reach (the egress bridge's). */
export interface RelayOptions {
  forbiddenPorts: number[];
}

/**
 * Listens on `socketPath` (replacing a stale socket file) and serves `methods`.
 *
 * orphanGraceMs: once the socket is root's (the runner locks it after the first ping), every
 * connection is the runner's. When no connection has been open for that long, the runner is gone
 * and has not come back: `onOrphaned` runs (the daemon exits, which ends the sandbox).
 */
export async function startServer(socketPath: string, methods: MethodTable, opts: { orphanGraceMs?: number; onOrphaned?: () => void; relay?: RelayOptions } = {}): Promise<Server> {
  await unlink(socketPath).catch(() => undefined);
  let open = 0;
  let lastSeen = Date.now();
  const server = createServer((socket) => {
    open++;
    socket.once('close', () => {
      open--;
      lastSeen = Date.now();
    });
    serveConnection(socket, methods, opts.relay);
  });
  if (opts.orphanGraceMs !== undefined && opts.orphanGraceMs > 0) {
    const grace = opts.orphanGraceMs;
    const timer = setInterval(() => {
      if (open === 0 && Date.now() - lastSeen >= grace) {
        clearInterval(timer);
        (opts.onOrphaned ?? (() => process.exit(0)))();
      }
    }, Math.min(5_000, Math.max(100, Math.floor(grace / 4))));
    timer.unref();
  }
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}

function serveConnection(socket: Socket, methods: MethodTable, relay?: RelayOptions): void {
  const inflight = new Map<RequestId, AbortController>();
  const splitter = new LineSplitter();
  let requests = 0;

  const send = (msg: DaemonMessage): boolean => {
    if (socket.destroyed) return true;
    return socket.write(encodeMessage(msg));
  };
  const drained = (): Promise<void> =>
    new Promise((resolve) => {
      if (socket.destroyed || !socket.writableNeedDrain) return resolve();
      const done = (): void => {
        socket.off('drain', done);
        socket.off('close', done);
        resolve();
      };
      socket.on('drain', done);
      socket.on('close', done);
    });

  const dispatch = async (id: RequestId, method: string, params: unknown): Promise<void> => {
    if (method === 'cancel') {
      const target = (params as { id?: unknown } | undefined)?.id;
      const ctl = typeof target === 'number' || typeof target === 'string' ? inflight.get(target) : undefined;
      ctl?.abort();
      send({ id, result: { cancelled: ctl !== undefined } });
      return;
    }
    const handler = Object.hasOwn(methods, method) ? methods[method] : undefined;
    if (!handler) {
      send({ id, error: new DaemonError('NOT_IMPLEMENTED', `unknown method: ${method}`).toBody() });
      return;
    }
    if (inflight.has(id)) {
      send({ id, error: new DaemonError('INVALID_ARGUMENT', `request id already in flight: ${id}`).toBody() });
      return;
    }
    const ctl = new AbortController();
    inflight.set(id, ctl);
    try {
      const ctx: CallContext = {
        signal: ctl.signal,
        emit: (event, data) => send({ id, event, data }),
        drained,
      };
      const result = await handler(params, ctx);
      if (result instanceof ReplyWithBody) {
        // Header, raw bytes and the reply line go out together (nothing can come between them).
        if (!socket.destroyed) {
          socket.write(bodyHeader(result.bytes.length));
          socket.write(result.bytes);
        }
        send({ id, result: { ...result.result, [result.field]: '' }, body: { field: result.field, encoding: result.encoding } });
      } else {
        send({ id, result: result ?? null });
      }
    } catch (err) {
      send({ id, error: toErrorBody(err, ctl.signal.aborted, params) });
    } finally {
      inflight.delete(id);
    }
  };

  const onData = (chunk: Buffer): void => {
    let lines: string[];
    try {
      lines = splitter.push(chunk);
    } catch {
      send({ id: null, error: { code: 'INVALID_ARGUMENT', message: 'request line too long' } });
      socket.end();
      return;
    }
    for (const line of lines) {
      if (line.trim() === '') continue;
      let msg: { id?: unknown; method?: unknown; params?: unknown };
      try {
        msg = JSON.parse(line);
      } catch {
        send({ id: null, error: { code: 'INVALID_ARGUMENT', message: 'request is not valid JSON' } });
        continue;
      }
      const { id, method } = msg ?? {};
      if ((typeof id !== 'number' && typeof id !== 'string') || typeof method !== 'string') {
        send({ id: null, error: { code: 'INVALID_ARGUMENT', message: 'request needs an id and a method' } });
        continue;
      }
      requests++;
      if (method === 'relay') {
        // Relay mode takes the whole connection: only as its first and only request, with no
        // bytes after the request line (the runner waits for the reply before sending any).
        if (!relay) {
          send({ id, error: new DaemonError('NOT_IMPLEMENTED', 'relay is not enabled in this daemon').toBody() });
          continue;
        }
        if (requests !== 1 || lines.length !== 1 || splitter.buffered !== 0) {
          send({ id, error: new DaemonError('INVALID_ARGUMENT', 'relay must be the first and only request of a fresh connection, with nothing after its line').toBody() });
          socket.end();
          return;
        }
        socket.pause();
        socket.off('data', onData);
        void serveRelay(socket, id, msg.params, relay);
        return;
      }
      void dispatch(id, method, msg.params);
    }
  };
  socket.on('data', onData);
  // Nobody is left to read the replies: stop everything this connection started.
  socket.on('close', () => {
    for (const ctl of inflight.values()) ctl.abort();
  });
  socket.on('error', () => socket.destroy());
}

/** The request field an error is about: the one its message starts with ("path: ..."), else the request's path. */
function fieldOf(message: string, params: unknown): string | undefined {
  const p = (params ?? {}) as Record<string, unknown>;
  const named = /^([A-Za-z][A-Za-z0-9_]*(?:\[\d+\])?(?:\.[A-Za-z][A-Za-z0-9_]*)?)[: ]/.exec(message)?.[1];
  if (named && (named in p || /[[.]/.test(named))) return named;
  return typeof p.path === 'string' ? 'path' : undefined;
}

/** Host-side descriptor paths never reach a caller. */
function scrub(message: string): string {
  return message.replace(/\/proc\/(?:self|\d+)\/fd\/\d+\/?/g, '');
}

/** Node's errno errors that mean "a path changed while the call ran". */
const CHANGED: Record<string, 'NOT_FOUND' | 'CONFLICT'> = {
  ENOENT: 'NOT_FOUND',
  ENOTDIR: 'CONFLICT',
  ELOOP: 'CONFLICT',
  EISDIR: 'CONFLICT',
  EEXIST: 'CONFLICT',
  ENOTEMPTY: 'CONFLICT',
  EXDEV: 'CONFLICT',
  ESTALE: 'CONFLICT',
};

export function toErrorBody(err: unknown, aborted: boolean, params?: unknown) {
  if (err instanceof DaemonError) {
    const body = err.toBody();
    // Every refusal names its field (details.field), as the service's own refusals do.
    if (body.details?.field === undefined) {
      const field = fieldOf(body.message, params);
      if (field) body.details = { ...(body.details ?? {}), field };
    }
    body.message = scrub(body.message);
    return body;
  }
  if (aborted) return new DaemonError('CANCELLED', 'request cancelled').toBody();
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  const field = fieldOf('', params);
  const shown = typeof (params as { path?: unknown } | undefined)?.path === 'string' ? (params as { path: string }).path : undefined;
  const details: Record<string, unknown> = { ...(field ? { field } : {}), ...(shown !== undefined ? { path: shown } : {}), ...(code ? { errno: code } : {}) };
  if (code && CHANGED[code]) {
    const what = CHANGED[code] === 'NOT_FOUND' ? 'no longer exists' : 'changed';
    return new DaemonError(CHANGED[code], `${field ?? 'path'}: ${shown ?? 'a path'} ${what} while the call ran (something else in the workspace changed it); retry`, details).toBody();
  }
  if (code === 'EACCES' || code === 'EPERM') return new DaemonError('PERMISSION_DENIED', `${field ?? 'path'}: ${shown ?? 'a path'}: permission denied`, details).toBody();
  if (code === 'ENOSPC' || code === 'EDQUOT') return new DaemonError('RESOURCE_EXHAUSTED', 'the workspace disk is full', details).toBody();
  const message = err instanceof Error ? err.message : String(err);
  return new DaemonError('INTERNAL', scrub(message), details).toBody();
}
