/**
 * What the preview relay (http-gate.ts) lets through, as pure rules over headers and answers
 * (issue #42 items 1-3): the hop-by-hop and client-only request headers it replaces, Atelier's
 * credentials recognised by their format, the headers that act on the whole origin, the clamp of
 * a workspace's answer to what Node's HTTP server accepts, private caching, and the confinement of
 * the cookies a workspace's server sets to its link's path.
 */
import { STATUS_CODES, validateHeaderName, validateHeaderValue, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';

/** The most header fields a workspace's answer may carry (more is answered 502). */
export const PREVIEW_MAX_ANSWER_HEADERS = 256;

/** The most 1xx answers (100 Continue, 103 Early Hints, ...) a workspace may send before its answer. */
export const PREVIEW_MAX_INFORMATIONAL = 16;

export const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'proxy-authenticate', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host']);

/**
 * Request headers a client may not hand the workspace: the relay sets the forwarding ones itself
 * (issue #42 item 2), `expect` was answered by this server already, and the path-override headers
 * some frameworks honour would let a request name another path than its own.
 */
export const CLIENT_ONLY = new Set([
  'forwarded',
  'x-real-ip',
  'x-client-ip',
  'true-client-ip',
  'cf-connecting-ip',
  'fastly-client-ip',
  'x-cluster-client-ip',
  'x-original-forwarded-for',
  'x-forwarded',
  'x-original-url',
  'x-rewrite-url',
  'x-original-host',
  'x-csrf-token',
  'expect',
]);

/**
 * Answer headers that act on the service's whole origin rather than on the preview's page
 * (issue #42 item 3): a workspace may not set HSTS for the service, clear its storage, move its
 * traffic elsewhere (Alt-Svc), pin keys, set origin-wide reporting or client hints, or widen a
 * service worker's scope.
 */
export const ORIGIN_WIDE = new Set([
  'clear-site-data',
  'strict-transport-security',
  'alt-svc',
  'public-key-pins',
  'public-key-pins-report-only',
  'expect-ct',
  'nel',
  'report-to',
  'reporting-endpoints',
  'origin-agent-cluster',
  'accept-ch',
  'accept-ch-lifetime',
  'critical-ch',
  'service-worker-allowed',
  'set-login',
  'x-permitted-cross-domain-policies',
  'content-security-policy-report-only',
]);

export const SESSION_COOKIE = 'atelier_session';

/**
 * Atelier's credentials by their format, valid or not (issue #42 item 2): owner, narrowed and
 * read-only tokens (atl_), OAuth access and refresh tokens (atla_, atlr_), agent gateway tokens
 * (atlg_); and a preview grant segment (<id>.<sig>.<expiry>.<mac>), the browser's stand-in for
 * the owner's session.
 */
export const ATELIER_TOKEN = /(?<![A-Za-z0-9])atl[agr]?_[A-Za-z0-9_-]{20,}/;

export const GRANT_SEGMENT = /prv_[A-Za-z0-9_-]{24}\.[A-Za-z0-9_-]{43}\.[0-9a-z]{1,12}\.[A-Za-z0-9_-]{43}/;

/** Whether a header value (or a cookie's, a query parameter's) carries an Atelier credential. */
export function carriesAtelierCredential(value: string): boolean {
  if (ATELIER_TOKEN.test(value) || GRANT_SEGMENT.test(value)) return true;
  // Basic credentials (a token as the password) and percent-encoded forms.
  const basic = /^\s*Basic\s+([A-Za-z0-9+/=_-]+)\s*$/i.exec(value);
  if (basic && ATELIER_TOKEN.test(Buffer.from(basic[1]!, 'base64').toString('latin1'))) return true;
  if (value.includes('%')) {
    try {
      const decoded = decodeURIComponent(value);
      if (decoded !== value) return carriesAtelierCredential(decoded);
    } catch {
      // not percent-encoding: nothing more to find
    }
  }
  return false;
}

/** The path without query parameters whose value is an Atelier credential (`?access_token=atl_...`); unchanged otherwise. */
export function scrubQuery(rest: string): string {
  const q = rest.indexOf('?');
  if (q === -1) return rest;
  const params = rest.slice(q + 1).split('&');
  const kept = params.filter((p) => !carriesAtelierCredential(p.slice(p.indexOf('=') + 1).replace(/\+/g, ' ')));
  if (kept.length === params.length) return rest;
  return kept.length ? `${rest.slice(0, q)}?${kept.join('&')}` : rest.slice(0, q);
}

export function cookies(header: string | undefined): Array<[string, string]> {
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

export function decodeCookie(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

/**
 * A workspace's answer, clamped to what Node's HTTP server accepts and a browser should get: a
 * status of 100-599 (given Node's own reason phrase, never the workspace's), at most
 * PREVIEW_MAX_ANSWER_HEADERS fields, every name a token and every value free of control
 * characters. Returns why not when the answer cannot be forwarded. Other relays clamp with it too.
 */
export function checkAnswer(answer: Pick<IncomingMessage, 'statusCode' | 'rawHeaders'>, headers: OutgoingHttpHeaders, upgraded = false): string | null {
  const status = answer.statusCode ?? 0;
  if (!Number.isInteger(status) || status < 100 || status > 599) return `answered with status ${status}, not one of 100-599`;
  // (1xx answers are informational, counted apart; one as the final answer is a 101 without an upgrade.)
  if (status < 200 && !(upgraded && status === 101)) return `answered with status ${status} as its final answer`;
  if (answer.rawHeaders.length / 2 > PREVIEW_MAX_ANSWER_HEADERS) return `answered with ${answer.rawHeaders.length / 2} header fields, more than the ${PREVIEW_MAX_ANSWER_HEADERS} a preview forwards`;
  for (const [k, v] of Object.entries(headers)) {
    try {
      validateHeaderName(k);
      for (const one of Array.isArray(v) ? v : [v]) if (one !== undefined) validateHeaderValue(k, String(one));
    } catch {
      return `answered with a header (${JSON.stringify(k.slice(0, 64))}) whose name or value HTTP does not allow`;
    }
  }
  return null;
}

/** The status line of a relayed answer written by hand (a WebSocket's): the code and Node's reason phrase for it. */
export function statusLine(status: number): string {
  return `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Unknown'}\r\n`;
}

/** The Forwarded header's node for an address (RFC 7239: IPv6 quoted and bracketed). */
export function forwardedNode(addr: string | undefined): string {
  if (!addr) return 'unknown';
  return addr.includes(':') ? `"[${addr}]"` : addr;
}

/** Adds names to a Vary header (unless it is already `*`). */
export function addVary(out: OutgoingHttpHeaders, ...names: string[]): void {
  const have = String(out.vary ?? '')
    .split(',')
    .map((v) => v.trim())
    .filter(Boolean);
  if (have.includes('*')) return;
  for (const n of names) if (!have.some((h) => h.toLowerCase() === n.toLowerCase())) have.push(n);
  out.vary = have.join(', ');
}

/** A Cache-Control for an answer only its one viewer may keep: `private`, and no directive that lets a shared cache store it. */
export function privateCacheControl(given: string | string[] | number | undefined): string {
  const kept = (Array.isArray(given) ? given.join(',') : String(given ?? ''))
    .split(',')
    .map((d) => d.trim())
    .filter((d) => d && !/^(public|private|s-maxage\s*=.*|proxy-revalidate)$/i.test(d));
  return ['private', ...kept].join(', ');
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

/**
 * Runs a callback of a relay socket or request with its failure contained: a throw ends that one
 * request (`fail`), logged, and never reaches the event loop (issue #42 item 1).
 */
export function contained<A extends unknown[]>(fail: (err: unknown) => void, fn: (...args: A) => void): (...args: A) => void {
  return (...args: A) => {
    try {
      fn(...args);
    } catch (err) {
      try {
        fail(err);
      } catch {
        // the failure path itself failed: the sockets are destroyed by it or by their owners
      }
    }
  };
}

/**
 * Ends `res` (an answer already written whole) once the client's request has ended, or after
 * `lingerMs`: an answer that came before the request ended (a server that answers early) would
 * otherwise close the connection while the client still sends, and the reset can reach the
 * client before it has read the answer.
 */
export function endWhenRequestEnds(req: IncomingMessage, res: { end(): unknown }, lingerMs: number): void {
  if (req.complete || req.destroyed) return void res.end();
  let finished = false;
  const finish = (): void => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    res.end();
  };
  const timer = setTimeout(finish, lingerMs);
  req.once('end', finish);
  req.once('close', finish);
}
