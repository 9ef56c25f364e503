/**
 * OAuth Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document; the MCP
 * authorization spec of 2025-11-25 and 2026-07-28): a client may present an HTTPS URL as its
 * client_id; the authorization server fetches the JSON document at that URL and takes the client's
 * name and redirect URIs from it. Issue #32 item 1.
 *
 * The fetch is the dangerous part: an unauthenticated request to /oauth/authorize makes the runner
 * (root) send a GET to a URL of the requester's choice. So:
 * - the URL is https, in its normal form, with a path, no user info, no fragment, no dot segments;
 * - the host is resolved here, every address it resolves to must be a public one (no private,
 *   loopback, link-local, multicast, unspecified, reserved address, nor an IPv4-mapped or NAT64 form
 *   of one: src/sandbox/egress/address.ts), and the connection goes to the address that was checked
 *   (the socket's lookup is answered with it: no second resolution, so no DNS rebinding);
 * - TLS is verified against the URL's host; redirects are never followed (the draft forbids it);
 * - the answer must be 200, application/json (or application/…+json), not compressed, at most
 *   CIMD_MAX_BYTES, complete within CIMD_TIMEOUT_MS; at most CIMD_MAX_CONCURRENT fetches at once;
 * - the document is checked like a registration (redirect URI rule, grant and response types) plus
 *   the draft's rules (client_id equals the URL exactly, no shared secret, no private key material,
 *   auth method none);
 * - it is kept under the HTTP caching rules (RFC 9111), bounded by a floor and a ceiling;
 *   errors and invalid documents are never kept.
 * Development and tests may allow loopback addresses (--oauth-cimd-allow-loopback, refused by
 * the configuration unless the runner itself listens on loopback with no public origin) and trust
 * extra CAs for these fetches (--oauth-cimd-ca-file).
 */
import { request as httpsRequest } from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import { rootCertificates } from 'node:tls';
import { Resolver } from 'node:dns';
import { isIP } from 'node:net';
import { isPrivateAddress, parseIPv4, parseIPv6 } from '../../sandbox/egress/address.js';
import { addressKey } from '../../services/access/index.js';
import { cleanClientName, type CimdCache, type CimdClientRecord, type CimdDocument, type OAuthStore } from '../../services/access/index.js';
import { redirectUriProblem } from './redirect-uris.js';

/** Largest document read (the draft recommends 5 KB; documents with a `jwks` of a few keys are larger). */
export const CIMD_MAX_BYTES = 16 * 1024;
/** Time for the whole fetch: resolution, connection, TLS, headers and body. */
export const CIMD_TIMEOUT_MS = 5_000;
/** Bounds of how long a fetched document is reused when its answer allows caching at all. */
export const CIMD_FRESH_FLOOR_MS = 60_000;
export const CIMD_FRESH_CEILING_MS = 24 * 3600_000;
/**
 * Fetches in flight at once, over all clients (a request beyond it is refused, not queued). A fetch
 * holds its slot until its work has really ended (its resolution answered or cancelled, its socket
 * closed), not only until its deadline.
 */
export const CIMD_MAX_CONCURRENT = 4;
/** One name server query's timeout and the tries of each server (c-ares; backoff doubles it per round). */
export const CIMD_DNS_TIMEOUT_MS = 1000;
export const CIMD_DNS_TRIES = 2;
/** Fetches one client address may start per minute (a bucket of as many, refilled evenly), and at once. */
export const CIMD_FETCHES_PER_MINUTE = 20;
export const CIMD_FETCHES_PER_ADDRESS_AT_ONCE = 1;
/** Client addresses the per-address limit remembers (past it, idle full buckets are forgotten, then the oldest idle one). */
export const CIMD_MAX_ADDRESSES = 10_000;
/** Redirect URIs a document may list (registration takes 10; a shared document may name more). */
export const CIMD_MAX_REDIRECT_URIS = 20;

/** Why a metadata document URL or document cannot be used; `error` is the OAuth error code. */
export class CimdFailure extends Error {
  constructor(
    message: string,
    readonly error: 'invalid_client' | 'temporarily_unavailable' = 'invalid_client',
    /** Set when the client itself is over its limit: the page is a 429 with this Retry-After. */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

/**
 * The Client Identifier URL rule (draft section 3), strict: https, printable ASCII, a path other
 * than `/`, no user info, no fragment, no `.` or `..` segments (also percent-encoded), and written
 * in its normal form (lower-case host, no default port, nothing a URL parser rewrites), because the
 * document's client_id is compared with it as a string. A query is allowed (the draft says SHOULD
 * NOT, not MUST NOT).
 */
export function clientIdUrlProblem(u: string): string | null {
  if (u.length > 2000) return 'too long (at most 2000 characters)';
  if (!/^[\x21-\x7e]+$/.test(u)) return 'must be printable ASCII without spaces';
  let url: URL;
  try {
    url = new URL(u);
  } catch {
    return 'not an absolute URL';
  }
  if (url.protocol !== 'https:' || !u.toLowerCase().startsWith('https://')) return 'must be an https URL';
  if (u.includes('#')) return 'must not contain a fragment';
  const authority = u.slice('https://'.length).split(/[/?]/, 1)[0]!;
  if (authority.includes('@') || url.username || url.password) return 'must not contain a user name or password';
  const rawPath = u.slice('https://'.length + authority.length).split('?', 1)[0]!;
  if (rawPath === '' || rawPath === '/') return 'must have a path (a document at the root of a host is not accepted)';
  if (rawPath.split('/').some((seg) => /^(\.|%2e){1,2}$/i.test(seg))) return 'must not contain "." or ".." path segments';
  if (url.href !== u) return `must be written in its normal form ${JSON.stringify(url.href)} (it is compared as a string)`;
  return null;
}

/** True for 127.0.0.0/8, ::1 and ::ffff:127.x.y.z. */
export function isLoopbackAddress(ip: string): boolean {
  const v4 = parseIPv4(ip);
  if (v4) return v4[0] === 127;
  const v6 = parseIPv6(ip.startsWith('[') && ip.endsWith(']') ? ip.slice(1, -1) : ip);
  if (!v6) return false;
  if (v6.slice(0, 15).every((b) => b === 0) && v6[15] === 1) return true;
  return v6.slice(0, 10).every((b) => b === 0) && v6[10] === 0xff && v6[11] === 0xff && v6[12] === 127;
}

/** May a metadata document be fetched from this address? Public addresses; loopback too when allowed. */
export function fetchableAddress(ip: string, allowLoopback: boolean): boolean {
  if (!isPrivateAddress(ip)) return true;
  return allowLoopback && isLoopbackAddress(ip);
}

// ---- HTTP caching (RFC 9111) ----

function header(h: IncomingHttpHeaders, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

/** Cache-Control directives, lower-cased, with their values (quotes removed). */
export function parseCacheControl(v: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (v ?? '').split(',')) {
    const m = /^\s*([A-Za-z0-9!#$%&'*+.^_`|~-]+)\s*(?:=\s*(?:"([^"]*)"|([^\s,]*)))?\s*$/.exec(part);
    if (m) out.set(m[1]!.toLowerCase(), m[2] ?? m[3] ?? '');
  }
  return out;
}

/**
 * How long an answer may be reused, as RFC 9111 section 4.2 reads it for a private cache, then
 * bounded: `no-store` keeps nothing (not even validators) and `no-cache`, `max-age=0`, an Expires
 * not after Date (or unparseable), `Pragma: no-cache` without Cache-Control, or an Age past the
 * lifetime mean revalidation at every authorization request; any other lifetime is clamped to
 * [CIMD_FRESH_FLOOR_MS, CIMD_FRESH_CEILING_MS]; an answer that says nothing gets the floor.
 * ETag and Last-Modified are kept for a conditional request (If-None-Match, If-Modified-Since).
 */
export function cachePolicy(h: IncomingHttpHeaders, nowMs: number): CimdCache {
  const ccRaw = header(h, 'cache-control');
  const cc = parseCacheControl(ccRaw);
  if (cc.has('no-store')) return { freshUntil: null, etag: null, lastModified: null, cacheControl: null };
  const etagRaw = header(h, 'etag');
  const etag = etagRaw && etagRaw.length <= 200 && /^(W\/)?"[\x21\x23-\x7e]*"$/.test(etagRaw) ? etagRaw : null;
  const lmRaw = header(h, 'last-modified');
  const lastModified = lmRaw && lmRaw.length <= 100 && !Number.isNaN(Date.parse(lmRaw)) ? lmRaw : null;
  let lifetime: number | null = null;
  const maxAge = cc.get('max-age');
  if (maxAge !== undefined) lifetime = /^\d+$/.test(maxAge) ? Math.min(Number(maxAge), 10 ** 9) * 1000 : 0;
  else {
    const expires = header(h, 'expires');
    if (expires !== undefined) {
      const e = Date.parse(expires);
      const d = Date.parse(header(h, 'date') ?? '');
      lifetime = Number.isNaN(e) ? 0 : e - (Number.isNaN(d) ? nowMs : d);
    }
  }
  let fresh: number;
  if (cc.has('no-cache')) fresh = 0;
  else if (lifetime === null) fresh = !header(h, 'cache-control') && /no-cache/i.test(header(h, 'pragma') ?? '') ? 0 : CIMD_FRESH_FLOOR_MS;
  else {
    const ageRaw = header(h, 'age');
    const age = ageRaw && /^\d+$/.test(ageRaw.trim()) ? Number(ageRaw.trim()) * 1000 : 0;
    const remaining = lifetime - age;
    fresh = remaining <= 0 ? 0 : Math.min(Math.max(remaining, CIMD_FRESH_FLOOR_MS), CIMD_FRESH_CEILING_MS);
  }
  const cacheControl = ccRaw !== undefined && ccRaw.length <= 500 && /^[\x20-\x7e]*$/.test(ccRaw) ? ccRaw : null;
  return { freshUntil: fresh > 0 ? new Date(nowMs + fresh).toISOString() : null, etag, lastModified, cacheControl };
}

// ---- the document ----

const GRANT_TYPES = ['authorization_code', 'refresh_token'];
const PRIVATE_JWK_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'k', 'oth'];

/**
 * Checks a fetched document (draft sections 4 and 4.1, and this server's registration rules) and
 * returns what is kept. Unknown members are ignored, as RFC 7591 clients expect; `scope` is
 * ignored too (the scope is asked in each authorization request and shown to the owner there).
 */
export function validateDocument(url: string, json: unknown): CimdDocument {
  const fail = (m: string): never => {
    throw new CimdFailure(m);
  };
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return fail('the document is not a JSON object');
  const d = json as Record<string, unknown>;
  if (d.client_id !== url)
    fail(`client_id: the document's client_id (${JSON.stringify(typeof d.client_id === 'string' ? d.client_id.slice(0, 200) : (d.client_id ?? null))}) must equal the URL it was fetched from, exactly`);
  if ('client_secret' in d || 'client_secret_expires_at' in d) fail('client_secret: a metadata document must not carry a shared secret');
  const method = d.token_endpoint_auth_method ?? 'none';
  if (method !== 'none')
    fail(`token_endpoint_auth_method: ${JSON.stringify(method)} is not accepted for a metadata-document client (only none: shared-secret methods are forbidden for such clients, private_key_jwt is not implemented)`);
  const jwks = d.jwks as { keys?: unknown } | undefined;
  if (jwks !== undefined && (typeof jwks !== 'object' || jwks === null || (jwks.keys !== undefined && !Array.isArray(jwks.keys)))) fail('jwks: must be a JWK set {"keys": [...]}');
  if (Array.isArray(jwks?.keys) && jwks.keys.some((k) => typeof k === 'object' && k !== null && PRIVATE_JWK_MEMBERS.some((m) => m in (k as object))))
    fail('jwks: contains private key material (a metadata document may publish public keys only)');
  const uris = d.redirect_uris;
  if (!Array.isArray(uris) || uris.length === 0) return fail('redirect_uris: must be a non-empty list of redirect URIs');
  if (uris.length > CIMD_MAX_REDIRECT_URIS) fail(`redirect_uris: at most ${CIMD_MAX_REDIRECT_URIS}`);
  for (const u of uris) {
    if (typeof u !== 'string') fail('redirect_uris: every entry must be a string');
    const p = redirectUriProblem(u as string);
    if (p) fail(`redirect_uris: ${JSON.stringify((u as string).slice(0, 200))} ${p}`);
  }
  const strings = (v: unknown, field: string): string[] | undefined => {
    if (v === undefined) return undefined;
    if (!Array.isArray(v) || v.length > 10 || v.some((x) => typeof x !== 'string')) fail(`${field}: must be a list of strings`);
    return v as string[];
  };
  const grants = strings(d.grant_types, 'grant_types') ?? GRANT_TYPES;
  if (grants.some((g) => !GRANT_TYPES.includes(g))) fail(`grant_types: only authorization_code and refresh_token (got ${JSON.stringify(grants).slice(0, 200)})`);
  if (!grants.includes('authorization_code')) fail('grant_types: must include authorization_code');
  const responses = strings(d.response_types, 'response_types') ?? ['code'];
  if (responses.some((r) => r !== 'code')) fail('response_types: only code');
  if (d.client_name !== undefined && typeof d.client_name !== 'string') fail('client_name: must be a string');
  const name = cleanClientName(typeof d.client_name === 'string' ? d.client_name.slice(0, 1000) : '');
  const optional = (k: string, max: number) => (typeof d[k] === 'string' && (d[k] as string).length <= max ? { [k]: d[k] as string } : {});
  return {
    name,
    redirectUris: uris as string[],
    metadata: {
      client_id: url,
      client_name: name,
      redirect_uris: uris,
      grant_types: grants,
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      ...optional('client_uri', 2000),
      ...optional('software_id', 200),
      ...optional('software_version', 100),
    },
  };
}

// ---- the fetch ----

export type Fetched = { status: 200; json: unknown; headers: IncomingHttpHeaders } | { status: 304; headers: IncomingHttpHeaders };

/**
 * One fetch's deadline state: past it, nothing more is started, the resolution in flight is
 * cancelled and the request in flight is destroyed.
 */
interface Run {
  expired: boolean;
  abort?: (e: Error) => void;
  cancelResolve?: () => void;
}

export interface CimdFetcherOptions {
  /** DEVELOPMENT AND TESTS ONLY: loopback addresses may be fetched from. */
  allowLoopback: boolean;
  /** Extra CA certificates (PEM) trusted for these fetches, beside the system's. */
  extraCa?: string;
  /**
   * Resolves a host name to its addresses (tests count the calls); default: c-ares (node:dns
   * Resolver) with a bounded timeout, asking `dnsServers` or the system's name servers.
   */
  resolve?: (hostname: string, run: { cancel?: () => void }) => Promise<string[]>;
  /** Name servers for the default resolver (IP, IP:port, [IPv6]:port); empty: /etc/resolv.conf's. */
  dnsServers?: string[];
  timeoutMs?: number;
  maxBytes?: number;
}

/**
 * A bounded resolution: A and AAAA through c-ares, a Resolver of its own per lookup so that the
 * deadline cancels it (dns.lookup, getaddrinfo on libuv's thread pool, cannot be cancelled and holds
 * a thread of the pool file I/O, scrypt and zlib share for as long as the name server keeps silent;
 * c-ares runs on the event loop and holds no thread). The /etc/hosts file is not read (a document's
 * host is a public DNS name); localhost is loopback (RFC 6761) without a query. Settles only when
 * both queries have ended (answered, failed or cancelled).
 */
export function boundedResolver(servers: string[] = []): (hostname: string, run: { cancel?: () => void }) => Promise<string[]> {
  return (hostname, run) => {
    // RFC 6761: localhost and its subdomains are loopback, whatever a name server says.
    if (/^(.+\.)?localhost\.?$/i.test(hostname)) return Promise.resolve(['127.0.0.1', '::1']);
    const r = new Resolver({ timeout: CIMD_DNS_TIMEOUT_MS, tries: CIMD_DNS_TRIES });
    if (servers.length > 0) r.setServers(servers);
    run.cancel = () => r.cancel();
    const query = (fn: 'resolve4' | 'resolve6') =>
      new Promise<{ ok: string[] } | { err: NodeJS.ErrnoException }>((done) => r[fn](hostname, (err, addrs) => done(err ? { err } : { ok: addrs })));
    return Promise.all([query('resolve4'), query('resolve6')]).then(([a, aaaa]) => {
      const found = [...('ok' in a ? a.ok : []), ...('ok' in aaaa ? aaaa.ok : [])];
      if (found.length > 0) return found;
      const err = 'err' in a ? a.err : 'err' in aaaa ? aaaa.err : null;
      if (err && err.code !== 'ENODATA') throw err;
      return [];
    });
  };
}

/**
 * Fetches per client address (issue #42 item 4): a bucket of CIMD_FETCHES_PER_MINUTE, refilled
 * evenly over a minute, and CIMD_FETCHES_PER_ADDRESS_AT_ONCE in flight. Addresses are counted as
 * the login throttle counts them (IPv4, or the /64 of IPv6). Only fetches count: a kept fresh
 * document costs nothing.
 */
export class CimdAddressLimit {
  private readonly buckets = new Map<string, { tokens: number; at: number; inFlight: number }>();

  constructor(
    private readonly perMinute = CIMD_FETCHES_PER_MINUTE,
    private readonly now: () => number = Date.now,
  ) {}

  /** Takes a fetch for `address`, or throws the refusal; the returned function gives it back when the fetch has ended. */
  take(address: string | undefined): () => void {
    const key = addressKey(address);
    const now = this.now();
    let b = this.buckets.get(key);
    if (b) {
      b.tokens = Math.min(this.perMinute, b.tokens + ((now - b.at) * this.perMinute) / 60_000);
      b.at = now;
    } else {
      this.makeRoom();
      b = { tokens: this.perMinute, at: now, inFlight: 0 };
      this.buckets.set(key, b);
    }
    if (b.inFlight >= CIMD_FETCHES_PER_ADDRESS_AT_ONCE)
      throw new CimdFailure('a client metadata document is already being fetched for a request from this address; try again when it has finished', 'temporarily_unavailable', 5);
    if (b.tokens < 1)
      throw new CimdFailure(
        `too many client metadata documents were fetched for requests from this address (at most ${this.perMinute} a minute); try again later`,
        'temporarily_unavailable',
        Math.max(1, Math.ceil(((1 - b.tokens) * 60) / this.perMinute)),
      );
    b.tokens -= 1;
    b.inFlight++;
    const bucket = b;
    let given = false;
    return () => {
      if (given) return;
      given = true;
      bucket.inFlight--;
    };
  }

  /** Keeps the table bounded: full, idle buckets go first (they hold nothing), then the oldest idle one. */
  private makeRoom(): void {
    if (this.buckets.size < CIMD_MAX_ADDRESSES) return;
    const now = this.now();
    for (const [k, b] of this.buckets) if (b.inFlight === 0 && b.tokens + ((now - b.at) * this.perMinute) / 60_000 >= this.perMinute) this.buckets.delete(k);
    if (this.buckets.size < CIMD_MAX_ADDRESSES) return;
    for (const [k, b] of this.buckets)
      if (b.inFlight === 0) {
        this.buckets.delete(k);
        return;
      }
  }
}

export class CimdFetcher {
  private inFlight = 0;
  private readonly ca: string[] | undefined;
  private readonly resolveHost: (hostname: string, run: { cancel?: () => void }) => Promise<string[]>;
  private readonly timeoutMs: number;
  private readonly maxBytes: number;

  constructor(private readonly opts: CimdFetcherOptions) {
    this.ca = opts.extraCa ? [...rootCertificates, opts.extraCa] : undefined;
    this.resolveHost = opts.resolve ?? boundedResolver(opts.dnsServers);
    this.timeoutMs = opts.timeoutMs ?? CIMD_TIMEOUT_MS;
    this.maxBytes = opts.maxBytes ?? CIMD_MAX_BYTES;
  }

  /**
   * Fetches the document at `url` (already checked by clientIdUrlProblem), conditionally when
   * `prior` validators are given. `ended` is called when the fetch's work has really ended (which
   * may be after the deadline rejected the fetch).
   */
  async fetch(url: string, prior?: { etag: string | null; lastModified: string | null }, ended?: () => void): Promise<Fetched> {
    if (this.inFlight >= CIMD_MAX_CONCURRENT) {
      ended?.(); // no work was started
      throw new CimdFailure('too many client metadata documents are being fetched at once; try again in a moment', 'temporarily_unavailable');
    }
    this.inFlight++;
    let timer: NodeJS.Timeout | undefined;
    const run: Run = { expired: false };
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const e = new CimdFailure(`no complete answer within ${this.timeoutMs / 1000} s`);
        run.expired = true;
        run.cancelResolve?.();
        run.abort?.(e);
        reject(e);
      }, this.timeoutMs);
    });
    const work = this.fetchOnce(url, prior, run);
    // The slot is given back when the work has really ended, past the deadline too.
    const release = () => {
      this.inFlight--;
      ended?.();
    };
    work.then(release, release);
    try {
      return await Promise.race([work, deadline]);
    } finally {
      clearTimeout(timer);
    }
  }

  private async fetchOnce(raw: string, prior: { etag: string | null; lastModified: string | null } | undefined, run: Run): Promise<Fetched> {
    const url = new URL(raw);
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    let addresses: string[];
    if (isIP(host)) addresses = [host];
    else {
      try {
        const lookup: { cancel?: () => void } = {};
        const pending = this.resolveHost(host, lookup);
        run.cancelResolve = () => lookup.cancel?.();
        if (run.expired) run.cancelResolve();
        addresses = await pending;
      } catch (e) {
        if (run.expired) throw new CimdFailure('too late');
        throw new CimdFailure(`the host ${url.hostname} could not be resolved (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
      }
      if (addresses.length === 0) throw new CimdFailure(`the host ${url.hostname} has no address`);
    }
    if (run.expired) throw new CimdFailure('too late');
    const refused = addresses.find((a) => !fetchableAddress(a, this.opts.allowLoopback));
    if (refused !== undefined)
      throw new CimdFailure(
        `the host ${url.hostname} ${isIP(host) ? 'is' : `resolves to ${refused}, which is`} a private, loopback, link-local or otherwise special-use address; client metadata documents are fetched from public addresses only${this.opts.allowLoopback ? ' (and loopback, allowed by --oauth-cimd-allow-loopback)' : ''}`,
      );
    // The address checked above is the one connected to: the socket's lookup answers with it.
    const address = addresses[0]!;
    const family = isIP(address);
    const headers: Record<string, string> = { accept: 'application/json', 'accept-encoding': 'identity', 'user-agent': 'Atelier-OAuth (client metadata document fetch)' };
    if (prior?.etag) headers['if-none-match'] = prior.etag;
    if (prior?.lastModified) headers['if-modified-since'] = prior.lastModified;
    return new Promise<Fetched>((resolve, reject) => {
      let settled = false;
      const done = (e: Error | null, v?: Fetched) => {
        if (settled) return;
        settled = true;
        if (e) {
          req.destroy();
          reject(e);
        } else resolve(v!);
      };
      const req = httpsRequest(
        {
          hostname: host,
          port: url.port || 443,
          path: url.pathname + url.search,
          method: 'GET',
          headers,
          agent: false,
          ca: this.ca,
          servername: isIP(host) ? undefined : host,
          maxHeaderSize: 16 * 1024,
          lookup: ((_h: string, o: { all?: boolean }, cb: (...a: unknown[]) => void) => (o?.all ? cb(null, [{ address, family }]) : cb(null, address, family))) as never,
        },
        (res) => {
          const status = res.statusCode ?? 0;
          if (status === 304 && prior) {
            res.resume();
            return done(null, { status: 304, headers: res.headers });
          }
          if (status !== 200) {
            res.resume();
            if (status >= 300 && status < 400)
              return done(new CimdFailure(`the document URL answered HTTP ${status}, a redirect; redirects are not followed (the document must be served at the client_id URL itself)`));
            return done(new CimdFailure(`the document URL answered HTTP ${status}, not 200`));
          }
          const type = (header(res.headers, 'content-type') ?? '').split(';', 1)[0]!.trim().toLowerCase();
          if (type !== 'application/json' && !/^application\/[a-z0-9.!#$&^_-]+\+json$/.test(type))
            return done(new CimdFailure(`the document is served as ${type ? JSON.stringify(type.slice(0, 100)) : 'no content type'}, not application/json`));
          const encoding = (header(res.headers, 'content-encoding') ?? 'identity').trim().toLowerCase();
          if (encoding !== 'identity') return done(new CimdFailure(`the document is sent ${JSON.stringify(encoding.slice(0, 50))}-encoded; only an uncompressed document is read`));
          const length = Number(header(res.headers, 'content-length') ?? NaN);
          if (length > this.maxBytes) return done(new CimdFailure(`the document is larger than ${this.maxBytes / 1024} KiB`));
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (c: Buffer) => {
            size += c.length;
            if (size > this.maxBytes) return done(new CimdFailure(`the document is larger than ${this.maxBytes / 1024} KiB`));
            chunks.push(c);
          });
          res.on('error', (e) => done(new CimdFailure(`the answer broke off (${e.message})`)));
          res.on('aborted', () => done(new CimdFailure('the answer broke off')));
          res.on('end', () => {
            if (settled) return;
            let json: unknown;
            try {
              json = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            } catch {
              return done(new CimdFailure('the document is not valid JSON'));
            }
            done(null, { status: 200, json, headers: res.headers });
          });
        },
      );
      run.abort = (e) => done(e);
      req.on('error', (e: NodeJS.ErrnoException) => {
        const what = e.code === 'ECONNREFUSED' ? 'the connection was refused' : e.code?.startsWith('ERR_TLS') || /certificate|self.signed|unable to verify/i.test(e.message) ? `TLS: ${e.message}` : `${e.code ?? 'error'}: ${e.message}`;
        done(new CimdFailure(`the document could not be fetched (${what})`));
      });
      req.end();
    });
  }
}

/** How a resolved client came to be: made now, its document changed, or as it was. */
export type CimdChange = 'new' | 'changed' | 'same';

/**
 * The authorization server's view of metadata-document clients: the client for a URL, from the
 * kept document while it is fresh, otherwise fetched (or revalidated) and checked anew. A failed
 * fetch or an invalid document refuses the authorization request (the draft's SHOULD abort); the
 * kept client and its grants stay as they were.
 */
export class CimdClients {
  constructor(
    private readonly store: OAuthStore,
    private readonly fetcher: CimdFetcher,
    private readonly limit: CimdAddressLimit = new CimdAddressLimit(),
  ) {}

  /** `address`: the client address of the authorization request (the per-address fetch limit). */
  async resolve(url: string, address?: string): Promise<{ client: CimdClientRecord; change: CimdChange }> {
    const problem = clientIdUrlProblem(url);
    if (problem) throw new CimdFailure(`client_id: a Client ID Metadata Document URL ${problem}`);
    const kept = this.store.cimdClient(url);
    if (kept?.cache.freshUntil && Date.parse(kept.cache.freshUntil) > Date.now()) return { client: kept, change: 'same' };
    const prior = kept && (kept.cache.etag || kept.cache.lastModified) ? { etag: kept.cache.etag, lastModified: kept.cache.lastModified } : undefined;
    const giveBack = this.limit.take(address);
    const got = await this.fetcher.fetch(url, prior, giveBack);
    // A 304's headers update the kept answer's (RFC 9111 section 4.3.4): without a Cache-Control of
    // its own, the kept one (no-cache, say) still rules.
    const headers = got.status === 304 && header(got.headers, 'cache-control') === undefined && kept?.cache.cacheControl ? { ...got.headers, 'cache-control': kept.cache.cacheControl } : got.headers;
    const cache = cachePolicy(headers, Date.now());
    if (got.status === 304) {
      this.store.refreshCimdCache(kept!.id, cache);
      const again = this.store.cimdClient(url);
      if (!again) throw new CimdFailure('the client was revoked meanwhile; start the connection again');
      return { client: again, change: 'same' };
    }
    const doc = validateDocument(url, got.json);
    const saved = this.store.saveCimdClient(url, doc, cache);
    if (!saved) throw new CimdFailure("too many clients are waiting for the owner's approval; try again later", 'temporarily_unavailable');
    const change: CimdChange = !kept ? 'new' : kept.name !== saved.name || JSON.stringify(kept.redirectUris) !== JSON.stringify(saved.redirectUris) ? 'changed' : 'same';
    return { client: saved, change };
  }
}
