/**
 * Serves preview links (services/previews.ts; docs/workspaces.md "Preview URLs"): HTTP requests
 * and WebSocket upgrades under /p/<link>/ are checked (signature, expiry, revocation, the owner
 * or the owner's consent to a public link) and carried to one port inside the workspace through a
 * fresh relay connection to its daemon (sandbox/relay.ts): the workspace keeps no inbound network.
 *
 * What a preview document may do on this origin: every answer carries
 * `Content-Security-Policy: sandbox ...` without allow-same-origin, so the browser runs the
 * preview's pages in an opaque origin: they cannot read the dashboard, /api/v1 or another preview
 * (their requests there are cross-origin, carry `Origin: null`, which the server refuses, and
 * no cookie of this origin, which are all SameSite=Strict). The owner's session cookie and bearer
 * token are never passed on to the workspace's server; cookies the server sets are confined to its
 * link's path.
 */
import { splice } from '../contracts/splice.js';
import { request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import { ServiceError, errorEnvelope } from '../core/errors.js';
import type { PreviewService, ResolvedLink } from './previews.js';
import type { SandboxHandle } from '../sandbox/executor.js';

export interface PreviewGateDeps {
  previews: PreviewService;
  /** The live sandbox of an active workspace (WorkspaceService.activeHandle). */
  handle(workspaceId: string): Promise<SandboxHandle>;
  relay(h: SandboxHandle, port: number): Promise<Socket>;
  /** Whether a bearer token is the owner's (an owner token or an OAuth access token). */
  ownerBearer(token: string): boolean;
  /** Whether a dashboard session id is live. */
  ownerSession(id: string): boolean;
  log: { warn(obj: unknown, msg: string): void };
  /** Relayed connections one preview may hold open at once (default 64); past it 429. */
  maxConnections?: number;
}

/** The sandbox directive every preview answer carries: scripts, forms and popups, never this origin. */
export const PREVIEW_CSP = 'sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads';

const PREFIX = '/p/';
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'proxy-authenticate', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host']);
const SESSION_COOKIE = 'atelier_session';

export function isPreviewPath(url: string | undefined): boolean {
  return (url ?? '').startsWith(PREFIX);
}

interface Split {
  segment: string;
  /** The path the workspace's server sees (starting with /), with the query. */
  rest: string;
  /** Whether the segment was followed by a slash (/p/<seg> alone is redirected to /p/<seg>/). */
  slash: boolean;
}

function split(url: string): Split {
  const after = url.slice(PREFIX.length);
  const cut = after.search(/[/?#]/);
  if (cut === -1) return { segment: after, rest: '/', slash: false };
  const segment = after.slice(0, cut);
  if (after[cut] !== '/') return { segment, rest: '/' + after.slice(cut), slash: false };
  return { segment, rest: after.slice(cut), slash: true };
}

function cookies(header: string | undefined): Array<[string, string]> {
  if (!header) return [];
  return header
    .split(';')
    .map((c) => c.trim())
    .filter(Boolean)
    .map((c) => {
      const eq = c.indexOf('=');
      return eq === -1 ? [c, ''] : [c.slice(0, eq).trim(), c.slice(eq + 1).trim()];
    });
}

interface ErrorShape {
  code?: string;
  details?: { state?: string; field?: string };
}

/** 410 for a revoked or expired preview, 502 when nothing answers on the port, 503 for a workspace that is not running; else the code's status. */
function statusOf(err: ErrorShape, status: number): number {
  if (err.details?.state === 'revoked' || err.details?.state === 'expired') return 410;
  if (err.code === 'FAILED_PRECONDITION') return err.details?.field === 'port' ? 502 : 503;
  return status;
}

function decodeCookie(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

export class PreviewGate {
  /** Open relayed connections per preview: closed when it is revoked. */
  private readonly live = new Map<string, Set<Duplex>>();
  /** Relays open (or opening) per preview, against maxConnections. */
  private readonly relays = new Map<string, number>();
  readonly counts = { requests: 0, upgrades: 0, refused: 0 };

  constructor(private readonly deps: PreviewGateDeps) {
    deps.previews.onRevoke = (id) => {
      for (const s of this.live.get(id) ?? []) s.destroy();
      this.live.delete(id);
    };
  }

  private track(id: string, sockets: Duplex[], remainingMs: number): void {
    let set = this.live.get(id);
    if (!set) this.live.set(id, (set = new Set()));
    const timer = setTimeout(() => sockets.forEach((s) => s.destroy()), remainingMs);
    timer.unref();
    for (const s of sockets) {
      set.add(s);
      s.once('close', () => {
        clearTimeout(timer);
        set.delete(s);
        if (set.size === 0 && this.live.get(id) === set) this.live.delete(id);
      });
    }
  }

  /**
   * Takes one of the preview's connection slots (a public link must not let anyone hold an
   * unbounded number of sockets into the workspace); the returned function gives it back.
   */
  private slot(id: string): () => void {
    const max = this.deps.maxConnections ?? 64;
    const n = this.relays.get(id) ?? 0;
    if (n >= max) throw new ServiceError('RESOURCE_EXHAUSTED', `this preview has ${n} connections open, the most one preview may hold (${max}); close some and retry`, { limit: max });
    this.relays.set(id, n + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = (this.relays.get(id) ?? 1) - 1;
      if (left <= 0) this.relays.delete(id);
      else this.relays.set(id, left);
    };
  }

  /** Who may use the link: the public (consented), a browser grant, or the owner by token or session. */
  private authorize(req: IncomingMessage, resolved: ResolvedLink): { via: 'public' | 'grant' | 'bearer' | 'session'; strippedAuth: boolean } {
    if (resolved.kind === 'public') return { via: 'public', strippedAuth: this.bearerIsOwner(req) };
    if (resolved.kind === 'grant') return { via: 'grant', strippedAuth: this.bearerIsOwner(req) };
    if (this.bearerIsOwner(req)) return { via: 'bearer', strippedAuth: true };
    const session = cookies(req.headers.cookie).find(([k]) => k === SESSION_COOKIE);
    if (session && this.deps.ownerSession(decodeCookie(session[1]))) return { via: 'session', strippedAuth: false };
    throw new ServiceError('UNAUTHENTICATED', 'this preview opens for the owner only: open it signed in to the dashboard, or send the owner\'s bearer token (a public link needs the owner\'s consent on the dashboard)', { field: 'authorization' });
  }

  private bearerIsOwner(req: IncomingMessage): boolean {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    return m ? this.deps.ownerBearer(m[1]!) : false;
  }

  /** The request headers the workspace's server gets. */
  private forwardHeaders(req: IncomingMessage, segment: string, port: number, stripAuth: boolean, upgrade: boolean): OutgoingHttpHeaders {
    const out: OutgoingHttpHeaders = {};
    const h: IncomingHttpHeaders = req.headers;
    for (const [k, v] of Object.entries(h)) {
      if (v === undefined || HOP.has(k)) continue;
      if (k === 'cookie') {
        // This origin's own cookies (the dashboard session) never reach the workspace.
        const kept = cookies(v as string).filter(([n]) => !n.startsWith('atelier_'));
        if (kept.length) out.cookie = kept.map(([n, val]) => `${n}=${val}`).join('; ');
        continue;
      }
      if (k === 'authorization' && stripAuth) continue;
      if (k.startsWith('x-forwarded-')) continue;
      out[k] = v;
    }
    out.host = `localhost:${port}`;
    out['x-forwarded-host'] = h.host ?? '';
    out['x-forwarded-proto'] = (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
    out['x-forwarded-prefix'] = `/p/${segment}`;
    if (upgrade) {
      out.connection = 'Upgrade';
      out.upgrade = h.upgrade ?? 'websocket';
    } else out.connection = 'close';
    return out;
  }

  /** The answer headers the browser gets: the workspace's, sandboxed, cookies kept to the link's path. */
  private answerHeaders(res: IncomingMessage, req: IncomingMessage, segment: string): OutgoingHttpHeaders {
    const out: OutgoingHttpHeaders = {};
    const prefix = `/p/${segment}`;
    for (const [k, v] of Object.entries(res.headers)) {
      if (v === undefined || HOP.has(k) || k === 'content-security-policy-report-only') continue;
      if (k === 'set-cookie') {
        const kept = (v as string[]).map((c) => confineCookie(c, prefix)).filter((c): c is string => c !== null);
        if (kept.length) out['set-cookie'] = kept;
        continue;
      }
      if (k === 'location' && typeof v === 'string' && v.startsWith('/') && !v.startsWith('//')) {
        out.location = prefix + v;
        continue;
      }
      out[k] = v;
    }
    // The workspace's own policy stays; ours is added (every policy given is enforced).
    const csp = res.headers['content-security-policy'];
    // (Comma-separated policies are separate policies, each enforced.)
    out['content-security-policy'] = [...(csp === undefined ? [] : Array.isArray(csp) ? csp : [csp]), PREVIEW_CSP].join(', ');
    out['referrer-policy'] = 'no-referrer';
    out['x-content-type-options'] = 'nosniff';
    if (req.headers.origin === 'null' && out['access-control-allow-origin'] === undefined) {
      out['access-control-allow-origin'] = 'null';
      out.vary = 'Origin';
    }
    return out;
  }

  private fail(res: ServerResponse, err: unknown): void {
    this.counts.refused++;
    const { status, body } = errorEnvelope(err);
    const httpStatus = statusOf(body.error as ErrorShape, status);
    if (res.headersSent) return void res.destroy();
    const headers: OutgoingHttpHeaders = { 'content-type': 'application/json', 'cache-control': 'no-store', 'content-security-policy': PREVIEW_CSP };
    if (httpStatus === 401) headers['www-authenticate'] = 'Bearer realm="atelier"';
    res.writeHead(httpStatus, headers);
    res.end(JSON.stringify(body));
  }

  async request(req: IncomingMessage, res: ServerResponse, onTrusted: () => void): Promise<void> {
    const url = req.url ?? '/';
    const { segment, rest, slash } = split(url);
    let resolved: ResolvedLink;
    let auth: ReturnType<PreviewGate['authorize']>;
    try {
      resolved = this.deps.previews.resolve(segment);
      // A CORS preflight of the preview's own (sandboxed, Origin: null) scripts: answered here,
      // it carries no credentials; the request that follows is checked as any other.
      if (req.method === 'OPTIONS' && req.headers.origin === 'null' && req.headers['access-control-request-method'] && resolved.kind !== 'owner') {
        onTrusted();
        res.writeHead(204, {
          'access-control-allow-origin': 'null',
          'access-control-allow-methods': String(req.headers['access-control-request-method']),
          'access-control-allow-headers': String(req.headers['access-control-request-headers'] ?? ''),
          'access-control-max-age': '600',
          vary: 'Origin',
        });
        return void res.end();
      }
      auth = this.authorize(req, resolved);
    } catch (err) {
      return this.fail(res, err);
    }
    onTrusted();
    if (!slash) {
      res.writeHead(308, { location: `/p/${segment}/${rest === '/' ? '' : rest.replace(/^\//, '')}`, 'cache-control': 'no-store' });
      return void res.end();
    }
    // A browser that showed the session goes on to a grant link: the preview's pages are sandboxed
    // and their own requests carry no cookie of this origin, so the grant is what lets them in.
    if (auth.via === 'session' && (req.method === 'GET' || req.method === 'HEAD')) {
      res.writeHead(303, { location: `/p/${this.deps.previews.grantSegment(resolved)}${rest}`, 'cache-control': 'no-store', 'referrer-policy': 'no-referrer' });
      return void res.end();
    }
    let upstream: Socket;
    try {
      upstream = await this.openRelay(resolved);
    } catch (err) {
      return this.fail(res, err);
    }
    this.counts.requests++;
    this.track(resolved.row.id, [upstream, req.socket], this.deps.previews.remainingMs(resolved, segment));
    const out = httpRequest({
      createConnection: () => upstream,
      method: req.method,
      path: rest,
      headers: this.forwardHeaders(req, segment, resolved.row.port, auth.strippedAuth, false),
    });
    // The relay comes paused (nothing read past the daemon's reply): flowing once the parser listens.
    out.once('socket', (s) => s.resume());
    out.on('response', (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, this.answerHeaders(answer, req, segment));
      answer.pipe(res);
      answer.on('error', () => res.destroy());
    });
    out.on('error', (err) => {
      this.deps.log.warn({ err, previewId: resolved.row.id }, 'preview request to the workspace failed');
      if (!res.headersSent) this.fail(res, new ServiceError('UNAVAILABLE', `the workspace's server on port ${resolved.row.port} closed the connection without an answer`));
      else res.destroy();
    });
    res.on('close', () => {
      if (!res.writableFinished) out.destroy();
    });
    req.pipe(out);
  }

  /** A connection slot of the preview, then a relay to its port through the workspace's daemon; the slot is freed when the relay closes, or at once when it cannot be opened. */
  private async openRelay(resolved: ResolvedLink): Promise<Socket> {
    const release = this.slot(resolved.row.id);
    try {
      const upstream = await this.deps.relay(await this.deps.handle(resolved.row.workspace_id), resolved.row.port);
      upstream.once('close', release);
      return upstream;
    } catch (err) {
      release();
      throw err;
    }
  }

  /** A WebSocket (or any Upgrade) under /p/: the same checks, then raw bytes both ways. */
  async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, onTrusted: () => void): Promise<void> {
    const refuse = (err: unknown): void => {
      this.counts.refused++;
      const { status, body } = errorEnvelope(err);
      const code = statusOf(body.error as ErrorShape, status);
      const text = JSON.stringify(body);
      socket.end(`HTTP/1.1 ${code} Refused\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`);
    };
    const { segment, rest, slash } = split(req.url ?? '/');
    let resolved: ResolvedLink;
    let auth: ReturnType<PreviewGate['authorize']>;
    try {
      if (!slash) throw new ServiceError('NOT_FOUND', 'no such preview link (a link is /p/<previewId>.<signature>/)', { field: 'path' });
      resolved = this.deps.previews.resolve(segment);
      auth = this.authorize(req, resolved);
    } catch (err) {
      return refuse(err);
    }
    onTrusted();
    let upstream: Socket;
    try {
      upstream = await this.openRelay(resolved);
    } catch (err) {
      return refuse(err);
    }
    if (socket.destroyed) return void upstream.destroy();
    this.counts.upgrades++;
    this.track(resolved.row.id, [upstream, socket], this.deps.previews.remainingMs(resolved, segment));
    const out = httpRequest({
      createConnection: () => upstream,
      method: req.method,
      path: rest,
      headers: this.forwardHeaders(req, segment, resolved.row.port, auth.strippedAuth, true),
    });
    out.once('socket', (s) => s.resume());
    out.on('upgrade', (answer, up, upHead) => {
      const headers = this.answerHeaders(answer, req, segment);
      let text = `HTTP/1.1 101 ${answer.statusMessage || 'Switching Protocols'}\r\nconnection: Upgrade\r\nupgrade: ${answer.headers.upgrade ?? 'websocket'}\r\n`;
      for (const [k, v] of Object.entries(headers)) for (const one of Array.isArray(v) ? v : [v]) if (one !== undefined) text += `${k}: ${one}\r\n`;
      socket.write(text + '\r\n');
      if (upHead.length) socket.write(upHead);
      if (head.length) up.write(head);
      splice(up, socket);
    });
    out.on('response', (answer) => {
      // The server would not upgrade: its answer goes back as it is, and the connection ends.
      const headers = this.answerHeaders(answer, req, segment);
      let text = `HTTP/1.1 ${answer.statusCode ?? 502} ${answer.statusMessage ?? ''}\r\nconnection: close\r\n`;
      for (const [k, v] of Object.entries(headers)) for (const one of Array.isArray(v) ? v : [v]) if (one !== undefined && k !== 'transfer-encoding' && k !== 'content-length') text += `${k}: ${one}\r\n`;
      socket.write(text + '\r\n');
      answer.pipe(socket);
    });
    out.on('error', () => socket.destroy());
    socket.on('error', () => out.destroy());
    out.end();
  }
}

/**
 * A Set-Cookie of the workspace's server, kept to its link's path: Domain dropped, Path put under
 * the link; cookies named like this origin's own (atelier_*) or needing Path=/ (__Host-) dropped.
 */
export function confineCookie(cookie: string, prefix: string): string | null {
  const parts = cookie.split(';').map((p) => p.trim());
  const name = (parts[0] ?? '').split('=')[0]!.trim();
  if (!name || name.toLowerCase().startsWith('atelier_') || name.startsWith('__Host-')) return null;
  let path = '/';
  const attrs: string[] = [];
  for (const a of parts.slice(1)) {
    const [k, ...v] = a.split('=');
    const key = (k ?? '').trim().toLowerCase();
    if (key === 'domain') continue;
    if (key === 'path') {
      const p = v.join('=').trim();
      path = p.startsWith('/') ? p : '/';
      continue;
    }
    attrs.push(a);
  }
  return [parts[0], `Path=${prefix}${path}`, ...attrs].join('; ');
}
