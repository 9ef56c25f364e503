/**
 * The egress proxy's server wiring: one Unix socket, one request per connection. Reads the request
 * head (./http.ts), hands CONNECT to ./connect.ts and refuses everything else by the policy
 * (./policy.ts), emitting exactly one decision per answered request. The behaviour is described in
 * ../egress.ts's header.
 */
import { recordDecision } from '../../telemetry/tracing.js';
import { chmod, lstat, unlink } from 'node:fs/promises';
import net, { type Socket } from 'node:net';
import { defaultResolver, handleConnect, TunnelSlots, type ConnectDeps } from './connect.js';
import { answer, RequestHeadReader } from './http.js';
import { compileRules, decidePlainRequest, type EgressRule } from './policy.js';

export interface EgressDecision {
  /** ISO timestamp. */
  at: string;
  workspaceId: string;
  /** CONNECT, or GET etc. for refused plain requests ("" when not even that could be parsed). */
  method: string;
  /** Normalised host when it could be parsed, else a sanitised, truncated copy of the target. */
  host: string;
  /** 0 when no port could be parsed. */
  port: number;
  allowed: boolean;
  reason: string;
  /** The address actually connected (or last attempted, for connect failures). */
  resolved?: string;
}

export interface EgressProxyOptions {
  socketPath: string;
  workspaceId: string;
  rules: EgressRule[];
  onDecision: (d: EgressDecision) => void;
  /** Deadline for resolving and connecting together; default 10 000 ms (-> 504). */
  connectTimeoutMs?: number;
  /** Default: dns.lookup(host, { all: true, verbatim: true }). */
  resolver?: (host: string) => Promise<string[]>;
  /** Cap on concurrent tunnels (connecting or open); default 256 (-> 503). */
  maxTunnels?: number;
  /** Cap on the request header (request line + headers + CRLFCRLF); default 16 KiB (-> 431). */
  maxHeaderBytes?: number;
  /** Time allowed to send the complete request header; default 10 000 ms (-> 408). */
  headerTimeoutMs?: number;
  /** An open tunnel with no bytes in either direction for this long is closed; default 300 000 ms, 0 = never. */
  idleTimeoutMs?: number;
  /**
   * chmod applied to the socket right after listen (e.g. 0o666 so the sandbox user can connect
   * through the bind mount; access is then controlled by the directory). Default: untouched.
   */
  socketMode?: number;
}

export interface EgressProxy {
  /** Stops listening, destroys every connection and tunnel, removes the socket file. Idempotent. */
  close(): Promise<void>;
  /** Replaces the rules for new requests; throws (keeping the old rules) when a rule is invalid. */
  setRules(rules: EgressRule[]): void;
  socketPath: string;
}

/** Connections allowed beyond maxTunnels that are still sending their header. */
const PENDING_SLACK = 64;

/** Refuses to replace anything but a stale socket (nobody accepting on it). */
async function clearStaleSocket(socketPath: string): Promise<void> {
  let st;
  try {
    st = await lstat(socketPath);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  if (!st.isSocket()) throw new Error(`egress proxy: ${socketPath} exists and is not a socket`);
  const live = await new Promise<boolean>((resolve) => {
    const probe = net.connect(socketPath);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (live) throw new Error(`egress proxy: ${socketPath} is in use`);
  await unlink(socketPath);
}

export async function startEgressProxy(opts: EgressProxyOptions): Promise<EgressProxy> {
  const socketPath = opts.socketPath;
  const workspaceId = opts.workspaceId;
  const connectTimeoutMs = opts.connectTimeoutMs ?? 10_000;
  const maxTunnels = opts.maxTunnels ?? 256;
  const maxHeaderBytes = opts.maxHeaderBytes ?? 16 * 1024;
  const headerTimeoutMs = opts.headerTimeoutMs ?? 10_000;
  const idleTimeoutMs = opts.idleTimeoutMs ?? 300_000;
  for (const [name, v] of Object.entries({ connectTimeoutMs, maxTunnels, maxHeaderBytes, headerTimeoutMs })) {
    if (!Number.isFinite(v) || v <= 0) throw new TypeError(`egress proxy: ${name} must be positive`);
  }
  if (!Number.isFinite(idleTimeoutMs) || idleTimeoutMs < 0) throw new TypeError('egress proxy: idleTimeoutMs must be >= 0');
  let rules = compileRules(opts.rules);

  const sockets = new Set<Socket>();
  let closed = false;
  let closing: Promise<void> | undefined;

  const emit = (d: Omit<EgressDecision, 'at' | 'workspaceId'>): void => {
    const decision: EgressDecision = { at: new Date().toISOString(), workspaceId, ...d };
    if (decision.resolved === undefined) delete decision.resolved;
    // A span per decision (src/telemetry/tracing.ts; a no-op when tracing is off): host, port, verdict and reason.
    recordDecision(`egress ${d.method || 'request'}`, { 'atelier.workspace.id': workspaceId, 'server.address': d.host, 'server.port': d.port, 'atelier.egress.allowed': d.allowed, 'atelier.egress.reason': d.reason }, d.allowed ? undefined : 'refused');
    try {
      opts.onDecision(decision);
    } catch {
      // A failing logger must not take the proxy down.
    }
  };

  const track = (s: Socket): void => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  };

  const connectDeps: ConnectDeps = {
    resolver: opts.resolver ?? defaultResolver,
    connectTimeoutMs,
    idleTimeoutMs,
    slots: new TunnelSlots(maxTunnels),
    emit,
    track,
  };

  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    if (closed) {
      client.destroy();
      return;
    }
    track(client);
    client.on('error', () => client.destroy());
    const head = new RequestHeadReader(maxHeaderBytes);
    let headerDone = false;

    const fail = (status: number, reason: string, method = ''): void => {
      headerDone = true;
      clearTimeout(headerTimer);
      client.off('data', onData);
      emit({ method, host: '', port: 0, allowed: false, reason });
      answer(client, status, reason);
    };

    const headerTimer = setTimeout(() => fail(408, 'request header timeout'), headerTimeoutMs);
    headerTimer.unref();
    client.once('close', () => clearTimeout(headerTimer));
    client.once('end', () => {
      // Gave up before completing the header: nothing to decide.
      if (!headerDone) client.destroy();
    });

    const onData = (chunk: Buffer): void => {
      const h = head.push(chunk);
      if (h.state === 'more') return;
      if (h.state === 'error') return fail(h.status, h.reason, h.method);
      headerDone = true;
      clearTimeout(headerTimer);
      client.off('data', onData);
      client.pause();
      if (h.rest.length > 0) client.unshift(h.rest);
      if (h.method === 'CONNECT') {
        handleConnect(connectDeps, rules, client, h.target).catch(() => client.destroy());
      } else {
        const d = decidePlainRequest(h.target);
        emit({ method: h.method, host: d.host, port: d.port, allowed: false, reason: d.reason });
        answer(client, d.status, d.reason);
      }
    };
    client.on('data', onData);
  });
  server.maxConnections = maxTunnels + PENDING_SLACK;

  await clearStaleSocket(socketPath);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.on('error', () => {});
  if (opts.socketMode !== undefined) {
    try {
      await chmod(socketPath, opts.socketMode);
    } catch (err) {
      server.close();
      throw err;
    }
  }

  return {
    socketPath,
    setRules(next: EgressRule[]): void {
      rules = compileRules(next);
    },
    close(): Promise<void> {
      closing ??= (async () => {
        closed = true;
        const done = new Promise<void>((resolve) => server.close(() => resolve()));
        for (const s of sockets) s.destroy();
        await done;
        try {
          const st = await lstat(socketPath);
          if (st.isSocket()) await unlink(socketPath);
        } catch {
          // Already gone (node removes it on close).
        }
      })();
      return closing;
    },
  };
}
