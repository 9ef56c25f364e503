/**
 * Serves preview links (services/previews/links.ts; docs/workspaces.md "Preview URLs"): HTTP requests
 * and WebSocket upgrades under /p/<link>/ are checked (signature, expiry, revocation, the owner
 * or the owner's consent to a public link) and carried to one port inside the workspace through a
 * fresh relay connection to its daemon (sandbox/relay.ts): the workspace keeps no inbound network.
 *
 * What a preview document may do on this origin: every answer carries
 * `Content-Security-Policy: sandbox ...` without allow-same-origin, so the browser runs the
 * preview's pages in an opaque origin: they cannot read the dashboard, /api/v1 or another preview
 * (their requests there are cross-origin, carry `Origin: null`, which the server refuses, and
 * no cookie of this origin, which are all SameSite=Strict). No Atelier credential is passed on to
 * the workspace's server (any bearer, header value, cookie or query value in Atelier's token
 * format, every atelier_* cookie, the browser grant); cookies the server sets are confined to its
 * link's path; headers that act on the whole origin (HSTS, Clear-Site-Data, Alt-Svc, ...) are dropped.
 *
 * What the workspace's server answers is untrusted bytes (issue #42 item 1): the relay forwards
 * only what Node's HTTP server accepts (a status of 100-599 with Node's own reason phrase, header
 * names and values checked before anything is written, a bounded number of headers and of 1xx
 * answers) and answers 502 otherwise; every callback on a relay socket or request runs contained
 * (`contained`), so a failure ends that one request and never the runner. The rules over headers and
 * answers (what is stripped, replaced, dropped and clamped) are in relay-rules.ts.
 */
import { splice } from '../../contracts/splice.js';
import { request as httpRequest, type ClientRequest, type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import { ServiceError, errorEnvelope } from '../../core/errors.js';
import type { PreviewService, ResolvedLink } from './links.js';
import type { SandboxHandle } from '../../sandbox/executor.js';
import { contained, endWhenRequestEnds, HOP, CLIENT_ONLY, ORIGIN_WIDE, SESSION_COOKIE, carriesAtelierCredential, scrubQuery, cookies, decodeCookie, checkAnswer, statusLine, forwardedNode, addVary, privateCacheControl, confineCookie, PREVIEW_MAX_INFORMATIONAL } from './relay-rules.js';
export { PREVIEW_MAX_ANSWER_HEADERS, PREVIEW_MAX_INFORMATIONAL, carriesAtelierCredential, checkAnswer, confineCookie } from './relay-rules.js';

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
  /** The client's address (behind trusted proxies, core/client-address.ts); default: the TCP peer's. */
  clientAddress?(req: IncomingMessage): string;
  /** Relayed connections one preview may hold open at once (default 64); past it 429. */
  maxConnections?: number;
  /** Client connections that came in through public links, all links together (default 256); past it 429. */
  maxPublicConnections?: number;
}

/** The sandbox directive every preview answer carries: scripts, forms and popups, never this origin. */
export const PREVIEW_CSP = 'sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads';

const PREFIX = '/p/';

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

interface ErrorShape {
  code?: string;
  details?: { state?: string; field?: string; gateway?: boolean };
}

/** 410 for a revoked or expired preview, 502 when nothing answers on the port or the answer cannot be forwarded, 503 for a workspace that is not running; else the code's status. */
function statusOf(err: ErrorShape, status: number): number {
  if (err.details?.state === 'revoked' || err.details?.state === 'expired') return 410;
  if (err.details?.gateway) return 502;
  if (err.code === 'FAILED_PRECONDITION') return err.details?.field === 'port' ? 502 : 503;
  return status;
}

/** A 502: the workspace's server answered something the relay will not forward, or nothing. */
function badGateway(port: number, why: string): ServiceError {
  return new ServiceError('UNAVAILABLE', `the workspace's server on port ${port} ${why}`, { field: 'port', gateway: true });
}

/**
 * An answer whose connection ends before its body does goes to `end` (the client's answer is cut
 * short too). Returns the function that stops watching, for an answer the relay ends itself.
 */
function cutShort(answer: IncomingMessage, port: number, end: (err: unknown) => void): () => void {
  const cut = (): void => end(badGateway(port, 'closed the connection in the middle of its answer'));
  answer.on('error', cut);
  answer.on('aborted', cut);
  return () => {
    answer.off('error', cut);
    answer.off('aborted', cut);
    answer.on('error', () => undefined);
  };
}


/** How long an answer that came before its request ended waits for the rest of the request before its connection closes. */
const EARLY_ANSWER_LINGER_MS = 10_000;

export class PreviewGate {
  /** Open sockets per preview (relays, and the client connections that used it): closed when it is revoked. */
  private readonly live = new Map<string, Set<Duplex>>();
  /** The previews each tracked socket used (a keep-alive connection gets one close listener, whatever it asks). */
  private readonly seen = new WeakMap<Duplex, Set<string>>();
  /** Relays open (or opening) per preview, against maxConnections. */
  private readonly relays = new Map<string, number>();
  /** Client connections that came in through a public link, against maxPublicConnections. */
  private readonly publicClients = new Set<Duplex>();
  readonly counts = { requests: 0, upgrades: 0, refused: 0 };

  constructor(private readonly deps: PreviewGateDeps) {
    deps.previews.onRevoke = (id) => {
      for (const s of this.live.get(id) ?? []) s.destroy();
      this.live.delete(id);
    };
  }

  /** The socket closes when preview `id` is revoked; its one close listener forgets it everywhere. */
  private watch(id: string, socket: Duplex): void {
    let set = this.live.get(id);
    if (!set) this.live.set(id, (set = new Set()));
    set.add(socket);
    let ids = this.seen.get(socket);
    if (!ids) {
      const mine = (ids = new Set());
      this.seen.set(socket, mine);
      socket.once('close', () => {
        for (const i of mine) {
          const l = this.live.get(i);
          if (!l) continue;
          l.delete(socket);
          if (l.size === 0) this.live.delete(i);
        }
        this.publicClients.delete(socket);
      });
    }
    ids.add(id);
  }

  /** The sockets are destroyed when the link (or its grant) expires, unless the first closed before. */
  private expireWith(sockets: Duplex[], remainingMs: number): void {
    const timer = setTimeout(() => sockets.forEach((s) => s.destroy()), remainingMs);
    timer.unref();
    sockets[0]!.once('close', () => clearTimeout(timer));
  }

  /**
   * Counts a client connection that came in through a public link (anyone may hold the link: their
   * connections are bounded together); past maxPublicConnections it is refused.
   */
  private admitPublic(socket: Duplex, id: string): void {
    if (this.publicClients.has(socket)) return;
    const max = this.deps.maxPublicConnections ?? 256;
    if (this.publicClients.size >= max)
      throw new ServiceError('RESOURCE_EXHAUSTED', `public preview links have ${this.publicClients.size} connections open, the most they may hold together (${max}); retry later`, { limit: max });
    this.publicClients.add(socket);
    this.watch(id, socket);
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
  private authorize(req: IncomingMessage, resolved: ResolvedLink): { via: 'public' | 'grant' | 'bearer' | 'session' } {
    if (resolved.kind === 'public') return { via: 'public' };
    if (resolved.kind === 'grant') return { via: 'grant' };
    if (this.bearerIsOwner(req)) return { via: 'bearer' };
    const session = cookies(req.headers.cookie).find(([k]) => k === SESSION_COOKIE);
    if (session && this.deps.ownerSession(decodeCookie(session[1]))) return { via: 'session' };
    throw new ServiceError('UNAUTHENTICATED', 'this preview opens for the owner only: open it signed in to the dashboard, or send the owner\'s bearer token (a public link needs the owner\'s consent on the dashboard)', { field: 'authorization' });
  }

  private bearerIsOwner(req: IncomingMessage): boolean {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    return m ? this.deps.ownerBearer(m[1]!) : false;
  }

  /**
   * The request headers the workspace's server gets (issue #42 item 2): no Atelier credential in
   * any of them (a bearer, a header value, a cookie in Atelier's format, any atelier_* cookie, a
   * grant), the forwarding headers the relay's own (the client's Forwarded, X-Real-IP,
   * X-Forwarded-* are replaced), X-Forwarded-Prefix the link without its grant, and a request
   * body framed as it came (chunked stays chunked whatever the method; other codings are refused).
   */
  private forwardHeaders(req: IncomingMessage, resolved: ResolvedLink, upgrade: boolean): OutgoingHttpHeaders {
    const out: OutgoingHttpHeaders = {};
    const h: IncomingHttpHeaders = req.headers;
    for (const [k, v] of Object.entries(h)) {
      if (v === undefined || HOP.has(k) || CLIENT_ONLY.has(k) || k.startsWith('x-forwarded-')) continue;
      if (k === 'cookie') {
        // This origin's own cookies (the dashboard session) and anything holding a token never reach the workspace.
        const kept = cookies(v as string).filter(([n, val]) => !n.toLowerCase().startsWith('atelier_') && !carriesAtelierCredential(val));
        if (kept.length) out.cookie = kept.map(([n, val]) => `${n}=${val}`).join('; ');
        continue;
      }
      if ((Array.isArray(v) ? v : [v]).some((one) => carriesAtelierCredential(one))) continue;
      out[k] = v;
    }
    const te = h['transfer-encoding'];
    if (te !== undefined && !upgrade) {
      if (te.trim().toLowerCase() !== 'chunked')
        throw new ServiceError('INVALID_ARGUMENT', `transfer-encoding: a preview request body may be sent chunked only (got ${JSON.stringify(te.slice(0, 40))})`, { field: 'transfer-encoding', rule: 'chunked' });
      out['transfer-encoding'] = 'chunked';
    }
    const addr = this.deps.clientAddress ? this.deps.clientAddress(req) : req.socket.remoteAddress;
    const proto = (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
    const host = h.host ?? '';
    out.host = `localhost:${resolved.row.port}`;
    out.forwarded = `for=${forwardedNode(addr)};host="${host.replace(/["\\]/g, '')}";proto=${proto}`;
    out['x-forwarded-for'] = addr ?? 'unknown';
    out['x-real-ip'] = addr ?? 'unknown';
    out['x-forwarded-host'] = host;
    out['x-forwarded-proto'] = proto;
    out['x-forwarded-prefix'] = `/p/${resolved.base}`;
    if (upgrade) {
      out.connection = 'Upgrade';
      out.upgrade = h.upgrade ?? 'websocket';
    } else out.connection = 'close';
    return out;
  }

  /**
   * The answer headers the browser gets: the workspace's, sandboxed, cookies kept to the link's
   * path, nothing that acts on the whole origin, and an owner's (or grant's) answer private to its
   * viewer (issue #42 item 3).
   */
  private answerHeaders(res: IncomingMessage, req: IncomingMessage, segment: string, via: ReturnType<PreviewGate['authorize']>['via']): OutgoingHttpHeaders {
    const out: OutgoingHttpHeaders = {};
    const prefix = `/p/${segment}`;
    for (const [k, v] of Object.entries(res.headers)) {
      if (v === undefined || HOP.has(k) || ORIGIN_WIDE.has(k)) continue;
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
      addVary(out, 'Origin');
    }
    if (via !== 'public') {
      // Only the owner may see it: no shared cache keeps it for someone else.
      out['cache-control'] = privateCacheControl(out['cache-control']);
      if (via === 'bearer') addVary(out, 'Authorization');
      if (via === 'session') addVary(out, 'Cookie');
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
      if (resolved.kind === 'public') this.admitPublic(req.socket, resolved.row.id);
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
      // Refused for too many connections: this one goes too.
      if ((err as ServiceError).code === 'RESOURCE_EXHAUSTED') res.shouldKeepAlive = false;
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
    let headers: OutgoingHttpHeaders;
    let upstream: Socket;
    try {
      headers = this.forwardHeaders(req, resolved, false);
      upstream = await this.openRelay(resolved);
    } catch (err) {
      return this.fail(res, err);
    }
    if (res.destroyed) return void upstream.destroy();
    this.counts.requests++;
    const id = resolved.row.id;
    const port = resolved.row.port;
    this.watch(id, req.socket);
    this.watch(id, upstream);
    this.expireWith([upstream], this.deps.previews.remainingMs(resolved, segment));
    let out: ClientRequest | undefined;
    let ended = false;
    // One way out for every failure of this request: logged once, the relay closed, a 502 if nothing was answered yet.
    const end = (err: unknown): void => {
      if (ended) return;
      ended = true;
      this.deps.log.warn({ err, previewId: id }, 'preview request to the workspace failed');
      out?.destroy();
      upstream.destroy();
      // What is left of the client's body is read and dropped (within the server's request
      // timeout), so the client finishes sending and reads its answer rather than a broken pipe.
      if (out) req.unpipe(out);
      req.resume();
      if (!res.headersSent && !res.destroyed) this.fail(res, err instanceof ServiceError ? err : badGateway(port, `failed: ${(err as Error)?.message ?? String(err)}`));
      else if (!res.writableFinished) res.destroy();
    };
    out = this.toWorkspace(upstream, req, rest, headers, port, end);
    if (!out) return;
    const request = out;
    request.on(
      'upgrade',
      contained(end, (_answer: IncomingMessage, up: Duplex) => {
        up.destroy();
        end(badGateway(port, 'answered a plain request with 101 Switching Protocols'));
      }),
    );
    request.on(
      'response',
      contained(end, (answer: IncomingMessage) => {
        const watched = cutShort(answer, port, end);
        if (ended) return void answer.destroy();
        const out = this.answerHeaders(answer, req, segment, auth.via);
        const why = checkAnswer(answer, out);
        if (why) {
          watched();
          return end(badGateway(port, why));
        }
        const status = answer.statusCode!;
        res.writeHead(status, out);
        // No body can follow (HEAD, 204, 304): the answer is whole now, whatever else the server sends.
        if (req.method === 'HEAD' || status === 204 || status === 304) {
          watched();
          res.end();
          return void upstream.destroy();
        }
        // The answer may come before the client has sent all of its body (a server that answers
        // early): the client's connection is closed only once its request has ended (bounded), so
        // the close does not reset the connection under an answer the client has not read yet.
        answer.pipe(res, { end: false });
        answer.once('end', contained(end, () => endWhenRequestEnds(req, res, EARLY_ANSWER_LINGER_MS)));
      }),
    );
    res.on('error', () => request.destroy());
    // The client went away before its answer was done, or in the middle of its request: the relay goes too.
    res.on('close', () => {
      if (!res.writableFinished) request.destroy();
    });
    req.on('close', () => {
      if (!req.complete) request.destroy();
    });
    req.pipe(request);
  }

  /**
   * The request toward the workspace's server over the relay, with the handlers every relayed
   * request has (contained): the relay resumed once the parser listens, at most
   * PREVIEW_MAX_INFORMATIONAL 1xx answers, and any error (a parse error names llhttp's code) one
   * way out through `end`. Undefined when it could not even be made (`end` was called).
   */
  private toWorkspace(upstream: Socket, req: IncomingMessage, rest: string, headers: OutgoingHttpHeaders, port: number, end: (err: unknown) => void): ClientRequest | undefined {
    let out: ClientRequest;
    try {
      out = httpRequest({ createConnection: () => upstream, method: req.method, path: scrubQuery(rest), headers });
    } catch (err) {
      end(err);
      return undefined;
    }
    // The relay comes paused (nothing read past the daemon's reply): flowing once the parser listens.
    out.once('socket', contained(end, (s: Socket) => s.resume()));
    let informational = 0;
    out.on(
      'information',
      contained(end, () => {
        if (++informational > PREVIEW_MAX_INFORMATIONAL) end(badGateway(port, `sent more than ${PREVIEW_MAX_INFORMATIONAL} informational (1xx) answers before its answer`));
      }),
    );
    out.on(
      'error',
      contained(end, (err: NodeJS.ErrnoException) => {
        const parse = typeof err.code === 'string' && err.code.startsWith('HPE_');
        end(badGateway(port, parse ? `sent an answer that is not valid HTTP (${err.code})` : 'closed the connection without an answer'));
      }),
    );
    return out;
  }

  /** A connection slot of the preview, then a relay to its port through the workspace's daemon; the slot is freed when the relay closes, or at once when it cannot be opened. */
  private async openRelay(resolved: ResolvedLink): Promise<Socket> {
    const release = this.slot(resolved.row.id);
    try {
      const upstream = await this.deps.relay(await this.deps.handle(resolved.row.workspace_id), resolved.row.port);
      upstream.once('close', release);
      // Its errors reach the request on it; none may go unheard in between.
      upstream.on('error', () => upstream.destroy());
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
      if (!socket.destroyed)
        socket.end(`${statusLine(code)}content-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\ncache-control: no-store\r\ncontent-security-policy: ${PREVIEW_CSP}\r\nconnection: close\r\n\r\n${text}`);
    };
    const { segment, rest, slash } = split(req.url ?? '/');
    let resolved: ResolvedLink;
    let auth: ReturnType<PreviewGate['authorize']>;
    try {
      if (!slash) throw new ServiceError('NOT_FOUND', 'no such preview link (a link is /p/<previewId>.<signature>/)', { field: 'path' });
      resolved = this.deps.previews.resolve(segment);
      if (resolved.kind === 'public') this.admitPublic(socket, resolved.row.id);
      auth = this.authorize(req, resolved);
    } catch (err) {
      return refuse(err);
    }
    onTrusted();
    let upstream: Socket;
    let headers: OutgoingHttpHeaders;
    try {
      headers = this.forwardHeaders(req, resolved, true);
      upstream = await this.openRelay(resolved);
    } catch (err) {
      return refuse(err);
    }
    if (socket.destroyed) return void upstream.destroy();
    this.counts.upgrades++;
    const id = resolved.row.id;
    const port = resolved.row.port;
    this.watch(id, socket);
    this.watch(id, upstream);
    this.expireWith([upstream, socket], this.deps.previews.remainingMs(resolved, segment));
    let out: ClientRequest | undefined;
    let answered = false;
    let ended = false;
    const end = (err: unknown): void => {
      if (ended) return;
      ended = true;
      this.deps.log.warn({ err, previewId: id }, 'preview upgrade to the workspace failed');
      out?.destroy();
      upstream.destroy();
      if (!answered) {
        answered = true;
        refuse(err instanceof ServiceError ? err : badGateway(port, `failed: ${(err as Error)?.message ?? String(err)}`));
      } else socket.destroy();
    };
    out = this.toWorkspace(upstream, req, rest, headers, port, end);
    if (!out) return;
    const request = out;
    const headOf = (answer: IncomingMessage, extra: OutgoingHttpHeaders, upgraded: boolean): string | OutgoingHttpHeaders => {
      const all = { ...this.answerHeaders(answer, req, segment, auth.via), ...extra };
      return checkAnswer(answer, all, upgraded) ?? all;
    };
    const serialize = (all: OutgoingHttpHeaders): string => {
      let text = '';
      for (const [k, v] of Object.entries(all)) for (const one of Array.isArray(v) ? v : [v]) if (one !== undefined) text += `${k}: ${one}\r\n`;
      return text;
    };
    request.on(
      'upgrade',
      contained(end, (answer: IncomingMessage, up: Duplex, upHead: Buffer) => {
        if (ended) return void up.destroy();
        const all = headOf(answer, { connection: 'Upgrade', upgrade: answer.headers.upgrade ?? 'websocket' }, true);
        if (typeof all === 'string') {
          up.destroy();
          return end(badGateway(port, all));
        }
        answered = true;
        socket.write(statusLine(101) + serialize(all) + '\r\n');
        if (upHead.length) socket.write(upHead);
        if (head.length) up.write(head);
        splice(up, socket);
      }),
    );
    request.on(
      'response',
      contained(end, (answer: IncomingMessage) => {
        // The server would not upgrade: its answer goes back (framed chunked), and the connection ends.
        const watched = cutShort(answer, port, end);
        if (ended) return void answer.destroy();
        const status = answer.statusCode!;
        const bodiless = status === 204 || status === 304;
        const all = headOf(answer, { connection: 'close', ...(bodiless ? {} : { 'transfer-encoding': 'chunked' }) }, false);
        if (typeof all === 'string') {
          watched();
          return end(badGateway(port, all));
        }
        delete all['content-length'];
        answered = true;
        socket.write(statusLine(status) + serialize(all) + '\r\n');
        if (bodiless) {
          watched();
          socket.end();
          return void upstream.destroy();
        }
        answer.on(
          'data',
          contained(end, (chunk: Buffer) => {
            if (chunk.length) socket.write(Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]));
          }),
        );
        answer.on(
          'end',
          contained(end, () => {
            if (answer.complete) socket.end('0\r\n\r\n');
            else socket.destroy();
          }),
        );
      }),
    );
    socket.on('error', () => request.destroy());
    socket.on('close', () => request.destroy());
    request.end();
  }
}

