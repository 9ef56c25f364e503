/**
 * Per-workspace egress proxy (the `dependency-access` network policy).
 *
 * The runner starts one proxy per workspace on the HOST, listening on a Unix socket that is
 * bind-mounted into the sandbox; the in-sandbox bridge (./daemon/bridge.ts) exposes it as
 * http://127.0.0.1:3128. The proxy speaks just enough HTTP/1.1 to accept one request per
 * connection:
 *
 *   - `CONNECT host:port` is the only thing that can succeed. In order:
 *       1. the authority is parsed and the host normalised (see normaliseHost below);
 *       2. the host is checked against the rules BEFORE any DNS lookup (an IP literal only
 *          matches a rule that names that exact IP; wildcards never match IPs);
 *       3. the port must be in a matching rule's ports (default [443]);
 *       4. the concurrent-tunnel cap is checked;
 *       5. the name is resolved on the host (opts.resolver, default dns.lookup all);
 *       6. if ANY resolved address is private (isPrivateAddress) the request is refused, unless a
 *          matching rule has allowPrivate;
 *       7. the proxy connects to the resolved addresses in order (the first that answers wins;
 *          it never resolves again, so there is no DNS-rebinding window), answers
 *          "HTTP/1.1 200 Connection Established" and pipes bytes both ways (half-close is
 *          propagated; a full close or error on either side destroys both).
 *     Steps 5 and 7 share one deadline (connectTimeoutMs, default 10 s) -> 504.
 *   - Any other request in absolute form (`GET http://host/...`) is refused with 403: only TLS
 *     through CONNECT leaves the sandbox. Anything unparseable is 400.
 *   - Every request that gets an answer produces exactly one EgressDecision (allowed or not, with
 *     a reason) through opts.onDecision; a connection that closes before sending a complete
 *     request header produces none.
 *
 * Status codes: 200 tunnel, 400 malformed, 403 policy refusal, 408 header timeout, 431 header
 * too large, 502 DNS/connect failure, 503 tunnel cap reached, 504 resolve/connect timeout.
 * Error answers carry a short text/plain body "atelier egress: <reason>" and the connection is
 * closed.
 *
 * Host normalisation (rules and requests alike): ASCII letters, digits, '-' and '.' only
 * (checked BEFORE lowercasing, so Unicode case folding such as the Kelvin sign cannot produce
 * an allowed name), lowercased, ONE trailing dot removed ("registry.npmjs.org." is the same
 * host as "registry.npmjs.org" and is resolved without the dot), labels of 1-63 characters not
 * starting or ending with '-', at most 253 characters. A name whose last label is numeric or
 * hex ("127.1", "2130706433", "example.0x7f") is refused as malformed: getaddrinfo would parse
 * it as an IPv4 address. Userinfo ("user@host"), ports out of 1-65535, zone ids ("fe80::1%eth0")
 * and anything else are malformed. IPv4 literals must be strict dotted decimal; IPv6 literals
 * must be bracketed in a CONNECT target and are compared by value (so "[::1]" and
 * "[0:0::1]" are the same host).
 *
 * Rule semantics: a rule grants (host, port); several rules may match one host and their grants
 * add up (allowed if any rule matching the host also lists the port; private addresses allowed if
 * any such rule has allowPrivate). "*.example.com" matches any name below example.com at any
 * depth, never example.com itself; a wildcard needs at least two labels after "*." ("*.com" is
 * rejected). Invalid rules make startEgressProxy/setRules throw (setRules then keeps the old
 * rules). setRules swaps a compiled snapshot: requests already being handled, and open tunnels,
 * keep the rules they started with.
 */
import { splice } from '../contracts/splice.js';
import { lookup } from 'node:dns/promises';
import { lstat, chmod, unlink } from 'node:fs/promises';
import net, { type Socket } from 'node:net';

export interface EgressRule {
  /** Exact host name, an exact IP literal, or "*.example.com" for subdomains (not the apex). */
  host: string;
  /** Allowed ports; default [443]. */
  ports?: number[];
  /**
   * Default false. Only for an operator-approved repository host such as an internal git server
   * or a test fixture on 127.0.0.1.
   */
  allowPrivate?: boolean;
}

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

/**
 * The default package-registry allowlist, port 443 only, no private addresses, no wildcards:
 *
 *   - registry.npmjs.org: npm's registry. It serves both the metadata and the tarballs
 *     (https://registry.npmjs.org/<name>/-/<name>-<version>.tgz), so it is also "its tarball
 *     host"; nothing else is needed by npm, pnpm or yarn configured with the npm registry.
 *     registry.yarnpkg.com is deliberately NOT included (it is a Cloudflare alias of the same
 *     registry; yarn v1 lockfiles that pin it need an operator rule).
 *   - pypi.org: the simple index (/simple/) and JSON API that pip, uv and poetry query.
 *   - files.pythonhosted.org: where PyPI's sdists and wheels are downloaded from.
 *
 * Frozen: copy it to extend it.
 */
export const DEFAULT_REGISTRY_RULES: EgressRule[] = Object.freeze(
  ['registry.npmjs.org', 'pypi.org', 'files.pythonhosted.org'].map((host) =>
    Object.freeze({ host, ports: Object.freeze([443]) as number[] }),
  ),
) as EgressRule[];

// ---------------------------------------------------------------------------------------------
// Addresses

/** Strict dotted-decimal IPv4 to 4 bytes, or null. */
function parseIPv4(s: string): number[] | null {
  if (!net.isIPv4(s)) return null;
  return s.split('.').map(Number);
}

/** IPv6 (no brackets, no zone id) to 16 bytes, or null. */
function parseIPv6(s: string): number[] | null {
  if (s.includes('%') || !net.isIPv6(s)) return null;
  let text = s;
  let tail: number[] = [];
  const lastColon = text.lastIndexOf(':');
  if (text.slice(lastColon + 1).includes('.')) {
    const v4 = parseIPv4(text.slice(lastColon + 1));
    if (!v4) return null;
    tail = [(v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!];
    text = text.slice(0, lastColon + 1) + '0'; // placeholder group, dropped below
  }
  const toGroups = (part: string): number[] => (part === '' ? [] : part.split(':').map((g) => parseInt(g, 16)));
  let groups: number[];
  const dbl = text.indexOf('::');
  if (dbl >= 0) {
    const left = toGroups(text.slice(0, dbl));
    const right = toGroups(text.slice(dbl + 2));
    if (tail.length) right.pop();
    const missing = 8 - tail.length - left.length - right.length;
    if (missing < 0) return null;
    groups = [...left, ...new Array<number>(missing).fill(0), ...right, ...tail];
  } else {
    groups = toGroups(text);
    if (tail.length) groups.pop();
    groups.push(...tail);
  }
  if (groups.length !== 8 || groups.some((g) => !Number.isInteger(g) || g < 0 || g > 0xffff)) return null;
  const bytes: number[] = [];
  for (const g of groups) bytes.push(g >> 8, g & 0xff);
  return bytes;
}

function inV4(b: number[], prefix: [number, number, number, number], bits: number): boolean {
  for (let i = 0; i < 4 && bits > 0; i++, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if ((b[i]! & mask) !== (prefix[i]! & mask)) return false;
  }
  return true;
}

/**
 * IPv4 ranges refused as targets. Everything IANA marks not globally reachable EXCEPT the three
 * documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24): they are not routed on
 * the internet, so they cannot reach anything internal through a real registry name, while
 * sandboxed CI networks (this project's own test machine resolves registry.npmjs.org to
 * 203.0.113.80) use them for the real registry front.
 */
const PRIVATE_V4: Array<[[number, number, number, number], number]> = [
  [[0, 0, 0, 0], 8], // "this network", includes 0.0.0.0 unspecified
  [[10, 0, 0, 0], 8], // RFC 1918
  [[100, 64, 0, 0], 10], // CGNAT, RFC 6598
  [[127, 0, 0, 0], 8], // loopback
  [[169, 254, 0, 0], 16], // link-local (cloud metadata lives here)
  [[172, 16, 0, 0], 12], // RFC 1918
  [[192, 0, 0, 0], 24], // IETF protocol assignments (DS-Lite, NAT64 discovery...)
  [[192, 88, 99, 0], 24], // deprecated 6to4 relay anycast
  [[192, 168, 0, 0], 16], // RFC 1918
  [[198, 18, 0, 0], 15], // benchmarking
  [[224, 0, 0, 0], 4], // multicast
  [[240, 0, 0, 0], 4], // reserved, includes 255.255.255.255 broadcast
];

function isPrivateV4(b: number[]): boolean {
  return PRIVATE_V4.some(([p, bits]) => inV4(b, p, bits));
}

function isPrivateV6(b: number[]): boolean {
  const zeroUpTo = (n: number): boolean => b.slice(0, n).every((x) => x === 0);
  // IPv4-mapped ::ffff:a.b.c.d: judged as the IPv4 address.
  if (zeroUpTo(10) && b[10] === 0xff && b[11] === 0xff) return isPrivateV4(b.slice(12));
  // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052): judged by the embedded IPv4 address, so a
  // NAT64 network can still reach public registries but not 64:ff9b::10.0.0.1.
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && b.slice(4, 12).every((x) => x === 0)) {
    return isPrivateV4(b.slice(12));
  }
  // Only global unicast 2000::/3 is public. Outside it: ::/8 (unspecified, loopback,
  // IPv4-compatible), 64:ff9b:1::/48 local-use NAT64, 100::/64 discard, fc00::/7 unique-local,
  // fe80::/10 link-local, fec0::/10 site-local, ff00::/8 multicast, and everything unassigned.
  if ((b[0]! & 0xe0) !== 0x20) return true;
  // 2001::/23 IETF protocol assignments (Teredo 2001::/32, ORCHID, AS112, ...).
  if (b[0] === 0x20 && b[1] === 0x01 && b[2]! < 0x02) return true;
  // 2002::/16 6to4: embeds an IPv4 address the host might route to; obsolete, refused whole.
  if (b[0] === 0x20 && b[1] === 0x02) return true;
  // 2001:db8::/32 and 3fff::/20 (documentation) are allowed, like their IPv4 counterparts.
  return false;
}

/**
 * True when `ip` must not be a target without allowPrivate: loopback, RFC 1918, CGNAT,
 * link-local, unique-local, unspecified, multicast, broadcast/reserved, 0.0.0.0/8, benchmarking,
 * IETF special ranges, IPv4-mapped and NAT64 (64:ff9b::/96) forms of any private IPv4, 6to4,
 * Teredo, anything outside IPv6 global unicast. Documentation ranges are NOT private (see
 * PRIVATE_V4). Fails closed: anything that is not a strict IPv4/IPv6 literal (including a
 * zone id "fe80::1%eth0" or a non-canonical "127.1") is reported private. Accepts "[v6]".
 */
export function isPrivateAddress(ip: string): boolean {
  if (typeof ip !== 'string') return true;
  const v4 = parseIPv4(ip);
  if (v4) return isPrivateV4(v4);
  const inner = ip.startsWith('[') && ip.endsWith(']') ? ip.slice(1, -1) : ip;
  const v6 = parseIPv6(inner);
  if (v6) return isPrivateV6(v6);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Hosts and rules

type HostKind = 'name' | 'ip';
interface ParsedHost {
  kind: HostKind;
  /** Normalised name, or the IP (IPv6 in canonical RFC 5952 form, without brackets). */
  host: string;
  /** Comparison key: the name, or the IP's bytes in hex. */
  key: string;
}

const NUMERIC_LABEL = /^(?:[0-9]+|0x[0-9a-f]*)$/;

function ipKey(bytes: number[]): string {
  return bytes.map((x) => x.toString(16).padStart(2, '0')).join('');
}

/** Normalises a host (see the header comment); returns an error text when invalid. */
function normaliseHost(raw: string): ParsedHost | string {
  if (raw.length === 0) return 'empty host';
  if (raw.length > 255) return 'host too long';
  if (raw.includes('@')) return 'userinfo is not allowed';
  if (raw.startsWith('[')) {
    if (!raw.endsWith(']')) return 'invalid IPv6 literal';
    const inner = raw.slice(1, -1);
    if (inner.includes('%')) return 'IPv6 zone ids are not allowed';
    const b = parseIPv6(inner);
    if (!b) return 'invalid IPv6 literal';
    // WHATWG URL serialises IPv6 canonically (RFC 5952): "[0:0::1]" -> "::1".
    return { kind: 'ip', host: new URL(`http://[${inner}]/`).hostname.slice(1, -1), key: ipKey(b) };
  }
  const v4 = parseIPv4(raw);
  if (v4) return { kind: 'ip', host: raw, key: ipKey(v4) };
  if (!/^[A-Za-z0-9.-]+$/.test(raw)) return 'invalid characters in host';
  let name = raw.toLowerCase();
  if (name.endsWith('.')) name = name.slice(0, -1);
  if (name.length === 0 || name.length > 253) return 'invalid host length';
  const labels = name.split('.');
  for (const label of labels) {
    if (label.length === 0 || label.length > 63) return 'empty or overlong label in host';
    if (label.startsWith('-') || label.endsWith('-')) return 'label starts or ends with "-"';
  }
  if (NUMERIC_LABEL.test(labels[labels.length - 1]!)) return 'numeric host that is not a dotted-decimal IPv4 address';
  return { kind: 'name', host: name, key: name };
}

interface CompiledRule {
  /** As given, for reasons. */
  label: string;
  kind: 'name' | 'ip' | 'wildcard';
  /** Name, ip key, or wildcard suffix including the leading dot. */
  key: string;
  ports: ReadonlySet<number>;
  allowPrivate: boolean;
}

function validPort(p: unknown): p is number {
  return typeof p === 'number' && Number.isInteger(p) && p >= 1 && p <= 65535;
}

function compileRules(rules: readonly EgressRule[]): CompiledRule[] {
  if (!Array.isArray(rules)) throw new TypeError('egress rules must be an array');
  return rules.map((rule, i) => {
    const where = `egress rule ${i} (${JSON.stringify(rule?.host)})`;
    if (!rule || typeof rule.host !== 'string') throw new TypeError(`${where}: host must be a string`);
    const ports = rule.ports ?? [443];
    if (!Array.isArray(ports) || ports.length === 0 || !ports.every(validPort)) {
      throw new TypeError(`${where}: ports must be a non-empty array of integers 1-65535`);
    }
    if (rule.allowPrivate !== undefined && typeof rule.allowPrivate !== 'boolean') {
      throw new TypeError(`${where}: allowPrivate must be a boolean`);
    }
    let kind: CompiledRule['kind'];
    let key: string;
    if (rule.host.startsWith('*.')) {
      const parsed = normaliseHost(rule.host.slice(2));
      if (typeof parsed === 'string' || parsed.kind !== 'name') throw new TypeError(`${where}: invalid wildcard`);
      if (!parsed.host.includes('.')) throw new TypeError(`${where}: a wildcard needs at least two labels after "*."`);
      kind = 'wildcard';
      key = '.' + parsed.host;
    } else {
      // Rule IPv6 literals may be written with or without brackets.
      const h = net.isIPv6(rule.host) ? `[${rule.host}]` : rule.host;
      const parsed = normaliseHost(h);
      if (typeof parsed === 'string') throw new TypeError(`${where}: ${parsed}`);
      kind = parsed.kind;
      key = parsed.key;
    }
    return { label: rule.host, kind, key, ports: new Set(ports), allowPrivate: rule.allowPrivate === true };
  });
}

function ruleMatches(rule: CompiledRule, h: ParsedHost): boolean {
  switch (rule.kind) {
    case 'ip':
      return h.kind === 'ip' && h.key === rule.key;
    case 'name':
      return h.kind === 'name' && h.key === rule.key;
    case 'wildcard':
      return h.kind === 'name' && h.key.length > rule.key.length && h.key.endsWith(rule.key);
  }
}

/** Splits a CONNECT authority "host:port" / "[v6]:port". */
function parseAuthority(target: string): { host: ParsedHost; port: number } | string {
  if (target.includes('@')) return 'userinfo is not allowed';
  let hostPart: string;
  let portPart: string;
  if (target.startsWith('[')) {
    const close = target.indexOf(']');
    if (close < 0 || target[close + 1] !== ':') return 'CONNECT target must be host:port';
    hostPart = target.slice(0, close + 1);
    portPart = target.slice(close + 2);
  } else {
    const colon = target.indexOf(':');
    if (colon < 0 || target.indexOf(':', colon + 1) >= 0) return 'CONNECT target must be host:port';
    hostPart = target.slice(0, colon);
    portPart = target.slice(colon + 1);
  }
  if (!/^[0-9]{1,5}$/.test(portPart)) return 'invalid port';
  const port = Number(portPart);
  if (!validPort(port)) return 'invalid port';
  const host = normaliseHost(hostPart);
  if (typeof host === 'string') return host;
  return { host, port };
}

function sanitise(s: string): string {
  return s.replace(/[^\x21-\x7e]/g, '?').slice(0, 255);
}

// ---------------------------------------------------------------------------------------------
// Proxy

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  403: 'Forbidden',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};

const TOKEN = "[!#$%&'*+\\-.^_`|~0-9A-Za-z]+";
const REQUEST_LINE = new RegExp(`^(${TOKEN}) ([\\x21-\\x7e]+) HTTP/1\\.[01]$`);
const HEADER_LINE = new RegExp(`^${TOKEN}:[\\t\\x20-\\x7e]*$`);
/** Connections allowed beyond maxTunnels that are still sending their header. */
const PENDING_SLACK = 64;
/** How long a refused client may linger after the answer before it is destroyed. */
const LINGER_MS = 2_000;

class TimeoutError extends Error {}

async function defaultResolver(host: string): Promise<string[]> {
  const found = await lookup(host, { all: true, verbatim: true });
  return found.map((a) => a.address);
}

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
  const resolver = opts.resolver ?? defaultResolver;
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
  let activeTunnels = 0;
  let closed = false;
  let closing: Promise<void> | undefined;

  const emit = (d: Omit<EgressDecision, 'at' | 'workspaceId'>): void => {
    const decision: EgressDecision = { at: new Date().toISOString(), workspaceId, ...d };
    if (decision.resolved === undefined) delete decision.resolved;
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

  /** Answers an error status and closes the connection. */
  const answer = (client: Socket, status: number, reason: string): void => {
    if (client.destroyed) return;
    const body = `atelier egress: ${reason}\n`;
    client.end(
      `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Error'}\r\n` +
        'Content-Type: text/plain; charset=utf-8\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n` +
        'Connection: close\r\n\r\n' +
        body,
    );
    // Drain whatever else the client sends so it sees the answer rather than a reset, and
    // destroy it if it lingers.
    client.resume();
    const timer = setTimeout(() => client.destroy(), LINGER_MS);
    timer.unref();
    client.once('close', () => clearTimeout(timer));
  };

  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    if (closed) {
      client.destroy();
      return;
    }
    track(client);
    client.on('error', () => client.destroy());
    const chunks: Buffer[] = [];
    let size = 0;
    let headerDone = false;
    let scanFrom = 0; // bytes already validated

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
      chunks.push(chunk);
      size += chunk.length;
      const buf = chunks.length === 1 ? chunk : Buffer.concat(chunks);
      if (chunks.length > 1) chunks.splice(0, chunks.length, buf);
      const end = buf.indexOf('\r\n\r\n');
      const limit = end >= 0 ? end + 4 : Math.min(buf.length, maxHeaderBytes + 1);
      // Only printable ASCII, tab, CR and LF in a header; a LF must follow a CR. This rejects
      // binary (a TLS ClientHello sent without CONNECT) at once instead of at the timeout.
      for (let i = scanFrom; i < limit; i++) {
        const c = buf[i]!;
        const ok = (c >= 0x20 && c <= 0x7e) || c === 0x09 || c === 0x0d || (c === 0x0a && i > 0 && buf[i - 1] === 0x0d);
        if (!ok) return fail(400, 'malformed request: invalid bytes in request header');
      }
      scanFrom = limit;
      if (end < 0 ? size > maxHeaderBytes : end + 4 > maxHeaderBytes) {
        return fail(431, 'request header too large');
      }
      if (end < 0) return;
      headerDone = true;
      clearTimeout(headerTimer);
      client.off('data', onData);
      client.pause();
      const rest = buf.subarray(end + 4);
      if (rest.length > 0) client.unshift(rest);
      const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
      const m = REQUEST_LINE.exec(lines[0]!);
      if (!m) return fail(400, 'malformed request line');
      const method = m[1]!;
      const target = m[2]!;
      for (const line of lines.slice(1)) {
        if (!HEADER_LINE.test(line)) return fail(400, 'malformed header line', method);
      }
      if (method === 'CONNECT') {
        handleConnect(client, target).catch(() => client.destroy());
      } else {
        handlePlain(client, method, target);
      }
    };
    client.on('data', onData);
  });
  server.maxConnections = maxTunnels + PENDING_SLACK;

  const handlePlain = (client: Socket, method: string, target: string): void => {
    if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(target)) {
      emit({ method, host: '', port: 0, allowed: false, reason: 'malformed request: not a proxy request' });
      answer(client, 400, 'malformed request: not a proxy request');
      return;
    }
    let host = sanitise(target);
    let port = 0;
    try {
      const url = new URL(target);
      host = sanitise(url.hostname);
      port = url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : url.protocol === 'http:' ? 80 : 0;
    } catch {
      // Keep the sanitised target as the host.
    }
    const reason = 'plain HTTP is not allowed, only TLS through CONNECT';
    emit({ method, host, port, allowed: false, reason });
    answer(client, 403, reason);
  };

  const handleConnect = async (client: Socket, target: string): Promise<void> => {
    const snapshot = rules;
    const method = 'CONNECT';
    const parsed = parseAuthority(target);
    if (typeof parsed === 'string') {
      const reason = `malformed CONNECT target: ${parsed}`;
      emit({ method, host: sanitise(target), port: 0, allowed: false, reason });
      answer(client, 400, reason);
      return;
    }
    const { host, port } = parsed;
    let decided = false;
    let releaseSlot = (): void => {};
    const decide = (status: number, allowed: boolean, reason: string, resolved?: string): void => {
      if (decided) return;
      decided = true;
      emit({ method, host: host.host, port, allowed, reason, resolved });
      if (!allowed) {
        releaseSlot();
        answer(client, status, reason);
      }
    };

    // 1. Policy on the name, before any lookup.
    const byHost = snapshot.filter((r) => ruleMatches(r, host));
    if (byHost.length === 0) {
      return decide(403, false, host.kind === 'ip' ? 'IP address not named by any rule' : 'host not in the allowed registries');
    }
    const byPort = byHost.filter((r) => r.ports.has(port));
    if (byPort.length === 0) return decide(403, false, `port ${port} not allowed for this host`);
    const allowPrivate = byPort.some((r) => r.allowPrivate);
    const rule = byPort.find((r) => r.allowPrivate === allowPrivate) ?? byPort[0]!;

    // 2. Capacity.
    if (activeTunnels >= maxTunnels) return decide(503, false, 'too many open tunnels');
    activeTunnels++;
    let released = false;
    releaseSlot = (): void => {
      if (!released) {
        released = true;
        activeTunnels--;
      }
    };
    let aborted = false;
    let pending: Socket | undefined;
    client.once('close', () => {
      releaseSlot();
      aborted = true;
      pending?.destroy();
      decide(0, false, 'client closed before the tunnel was established');
    });

    const deadline = Date.now() + connectTimeoutMs;
    const withDeadline = <T>(p: Promise<T>): Promise<T> => {
      p.catch(() => {});
      return new Promise<T>((resolve, reject) => {
        const t = setTimeout(() => reject(new TimeoutError()), Math.max(0, deadline - Date.now()));
        p.then(
          (v) => {
            clearTimeout(t);
            resolve(v);
          },
          (e: unknown) => {
            clearTimeout(t);
            reject(e);
          },
        );
      });
    };

    // 3. Resolve on the host (IP literals are their own address).
    let addresses: string[];
    if (host.kind === 'ip') {
      addresses = [host.host];
    } else {
      try {
        addresses = await withDeadline(Promise.resolve().then(() => resolver(host.host)));
      } catch (err) {
        if (aborted) return;
        if (err instanceof TimeoutError) return decide(504, false, 'timed out resolving the host');
        const code = (err as NodeJS.ErrnoException)?.code;
        return decide(502, false, `DNS lookup failed${typeof code === 'string' ? `: ${sanitise(code)}` : ''}`);
      }
      if (aborted) return;
      if (!Array.isArray(addresses) || addresses.length === 0 || !addresses.every((a) => typeof a === 'string' && net.isIP(a) !== 0)) {
        return decide(502, false, 'no usable address for the host');
      }
    }

    // 4. Every address must be public unless the rule allows private ones.
    if (!allowPrivate) {
      const bad = addresses.find((a) => isPrivateAddress(a));
      if (bad !== undefined) return decide(403, false, `host resolves to a private address (${bad})`);
    }

    // 5. Connect to the resolved addresses in order, never resolving again.
    let upstream: Socket | undefined;
    let lastError = 'no address';
    let lastAddress: string | undefined;
    let timedOut = false;
    for (let i = 0; i < addresses.length && !upstream; i++) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) {
        timedOut = true;
        break;
      }
      const address = addresses[i]!;
      lastAddress = address;
      const attempt = net.connect({ host: address, port, family: net.isIP(address), allowHalfOpen: true });
      track(attempt);
      pending = attempt;
      try {
        await new Promise<void>((resolve, reject) => {
          const t = setTimeout(() => reject(new TimeoutError()), remaining / (addresses.length - i));
          attempt.once('connect', () => {
            clearTimeout(t);
            resolve();
          });
          attempt.once('error', (e) => {
            clearTimeout(t);
            reject(e);
          });
          attempt.once('close', () => {
            clearTimeout(t);
            reject(new Error('closed'));
          });
        });
        upstream = attempt;
      } catch (err) {
        attempt.destroy();
        if (err instanceof TimeoutError) {
          timedOut = true;
          lastError = 'timed out';
        } else {
          timedOut = false;
          lastError = (err as NodeJS.ErrnoException).code ?? 'error';
        }
      }
      pending = undefined;
      if (aborted) {
        attempt.destroy();
        return;
      }
    }
    if (!upstream) {
      if (timedOut) return decide(504, false, 'timed out connecting to the host', lastAddress);
      return decide(502, false, `connect failed: ${sanitise(lastError)}`, lastAddress);
    }

    // 6. Tunnel.
    const up = upstream;
    up.on('error', () => {});
    decide(200, true, `allowed by rule ${rule.label}`, lastAddress);
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    const teardown = splice(client, up);
    if (idleTimeoutMs > 0) client.setTimeout(idleTimeoutMs, teardown);
  };

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
