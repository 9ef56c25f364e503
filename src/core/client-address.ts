/**
 * The address of the client behind a request (issue #42 item 11). Without trusted proxies
 * (--trusted-proxies empty, the default) it is the TCP peer's address and the forwarding headers
 * are ignored. When the peer is one of the trusted proxies, the hops the proxies recorded are
 * read (`Forwarded`, RFC 7239, or `X-Forwarded-For`) from the right: each trusted hop is skipped and
 * the first untrusted one is the client. A header a client sent itself is to the left of what the
 * proxy appended, so it is never reached unless the client's own hop is trusted.
 *
 * Whatever the headers hold, this never throws, and it falls back to an address that was seen:
 *  - a hop that is not an address (garbage, `unknown`, an obfuscated identifier such as `_hidden`,
 *    a bad port) ends the walk: the client is then the last trusted hop (the proxy that reported
 *    it), a bucket shared only by clients whose hops could not be read;
 *  - both headers present with different answers: the peer (a proxy that writes one header and
 *    passes the other through untouched would otherwise let a client choose its address);
 *  - more than MAX_HOPS hops are read at most (a header of thousands of hops costs no more);
 *  - every hop trusted: the left-most one.
 * The result is an IP address in its plain form (no brackets, port or zone; IPv4-mapped IPv6 as IPv4).
 */
import type { IncomingMessage } from 'node:http';
import { BlockList, isIP } from 'node:net';

/** Hops read from the right at most. */
export const MAX_HOPS = 32;
/** Header bytes read at most (from the right end). */
const MAX_HEADER_CHARS = 8192;

/** One entry of --trusted-proxies: an address or a CIDR, IPv4 or IPv6; the problem with it, or null. */
export function trustedProxyProblem(entry: string): string | null {
  const m = /^([^/]+)(?:\/(\d{1,3}))?$/.exec(entry);
  if (!m) return 'must be an IP address or a CIDR such as 10.0.0.0/8 or fd00::/8';
  const family = isIP(m[1]!);
  if (family === 0 || m[1]!.includes('%')) return 'must be an IP address or a CIDR such as 10.0.0.0/8 or fd00::/8 (no brackets, port or zone)';
  if (m[2] !== undefined && Number(m[2]) > (family === 4 ? 32 : 128)) return `has a prefix length over ${family === 4 ? 32 : 128}`;
  return null;
}

/** The trusted proxies as a matcher; entries must have passed trustedProxyProblem. */
export function trustedProxies(entries: readonly string[]): BlockList {
  const list = new BlockList();
  for (const e of entries) {
    const [addr, prefix] = e.split('/') as [string, string | undefined];
    const family = isIP(addr) === 4 ? 'ipv4' : 'ipv6';
    const v4 = family === 'ipv6' ? mappedV4(addr) : null;
    if (prefix === undefined) list.addAddress(v4 ?? addr, v4 ? 'ipv4' : family);
    else list.addSubnet(addr, Number(prefix), family);
  }
  return list;
}

const compiled = new Map<string, BlockList>();

/** The matcher of a configured list, built once per distinct list. */
function matcherOf(entries: readonly string[]): BlockList {
  const key = entries.join(',');
  let m = compiled.get(key);
  if (!m) {
    if (compiled.size > 16) compiled.clear();
    m = trustedProxies(entries);
    compiled.set(key, m);
  }
  return m;
}

function mappedV4(a: string): string | null {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(a);
  return m && isIP(m[1]!) === 4 ? m[1]! : null;
}

/** A plain address (zone removed, IPv4-mapped as IPv4), or null when `a` is none. */
function plain(a: string): string | null {
  const zone = a.indexOf('%');
  const bare = (zone >= 0 ? a.slice(0, zone) : a).toLowerCase();
  const family = isIP(bare);
  if (family === 0) return null;
  return family === 6 ? (mappedV4(bare) ?? bare) : bare;
}

function isTrusted(list: BlockList, a: string): boolean {
  return list.check(a, isIP(a) === 4 ? 'ipv4' : 'ipv6');
}

/**
 * One node as a proxy wrote it: `192.0.2.1`, `192.0.2.1:8080`, `2001:db8::1`, `[2001:db8::1]`,
 * `[2001:db8::1]:8080` (X-Forwarded-For writes them all); null for anything else.
 */
export function parseNode(raw: string): string | null {
  const s = raw.trim();
  if (s.length === 0 || s.length > 100) return null;
  if (s.startsWith('[')) {
    const m = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(s);
    if (!m || (m[2] !== undefined && Number(m[2]) > 65535)) return null;
    return isIP(m[1]!.split('%')[0]!) === 6 ? plain(m[1]!) : null;
  }
  const v4port = /^(\d+\.\d+\.\d+\.\d+)(?::(\d{1,5}))?$/.exec(s);
  if (v4port) return v4port[2] !== undefined && Number(v4port[2]) > 65535 ? null : plain(v4port[1]!);
  return isIP(s.split('%')[0]!) === 6 ? plain(s) : null;
}

/** The right-most part of a header (at most MAX_HEADER_CHARS), cut at a list separator. */
function tail(v: string | string[] | undefined): string | undefined {
  const s = Array.isArray(v) ? v.join(', ') : v;
  if (s === undefined || s.length <= MAX_HEADER_CHARS) return s;
  const cut = s.slice(-MAX_HEADER_CHARS);
  return cut.slice(cut.indexOf(',') + 1);
}

/** X-Forwarded-For's hops, right-most first (at most MAX_HOPS); null entries are unreadable hops. */
function xffHops(v: string): Array<string | null> {
  return v.split(',').reverse().slice(0, MAX_HOPS).map(parseNode);
}

/**
 * Forwarded's `for` hops, right-most first (at most MAX_HOPS). Elements are split at commas outside
 * quoted strings; an element without a readable `for` (or with two) is an unreadable hop (null).
 */
function forwardedHops(v: string): Array<string | null> {
  const elements: string[] = [];
  let cur = '';
  let quoted = false;
  for (let i = 0; i < v.length; i++) {
    const c = v[i]!;
    if (quoted && c === '\\' && i + 1 < v.length) {
      cur += c + v[++i];
      continue;
    }
    if (c === '"') quoted = !quoted;
    if (c === ',' && !quoted) {
      elements.push(cur);
      cur = '';
    } else cur += c;
  }
  elements.push(quoted ? '\u0000' : cur); // an unterminated quote: an unreadable last element
  return elements
    .reverse()
    .slice(0, MAX_HOPS)
    .map((el) => {
      const fors = el
        .split(';')
        .map((p) => /^\s*for\s*=\s*(.*?)\s*$/i.exec(p))
        .filter((m): m is RegExpExecArray => m !== null);
      if (fors.length !== 1) return null;
      let value = fors[0]![1]!;
      if (value.startsWith('"')) {
        if (value.length < 2 || !value.endsWith('"')) return null;
        value = value.slice(1, -1).replace(/\\(.)/g, '$1');
      }
      // "unknown" and obfuscated identifiers ("_hidden") are no address: parseNode answers null.
      return parseNode(value);
    });
}

/** The client address from the hops (right-most first) after the trusted peer `peer`. */
function walk(list: BlockList, peer: string, hops: Array<string | null>): string {
  let last = peer;
  for (const hop of hops) {
    if (hop === null) return last;
    if (!isTrusted(list, hop)) return hop;
    last = hop;
  }
  return last;
}

/**
 * The client address of a request, under the configured trusted proxies (addresses or CIDRs,
 * checked at start-up by trustedProxyProblem). Never throws.
 */
export function clientAddress(req: Pick<IncomingMessage, 'headers' | 'socket'>, trusted: readonly string[]): string {
  const peer = plain(req.socket?.remoteAddress ?? '') ?? 'unknown';
  if (trusted.length === 0 || peer === 'unknown') return peer;
  try {
    const list = matcherOf(trusted);
    if (!isTrusted(list, peer)) return peer;
    const fwd = tail(req.headers.forwarded);
    const xff = tail(req.headers['x-forwarded-for']);
    const byForwarded = fwd !== undefined ? walk(list, peer, forwardedHops(fwd)) : undefined;
    const byXff = xff !== undefined ? walk(list, peer, xffHops(xff)) : undefined;
    if (byForwarded !== undefined && byXff !== undefined) return byForwarded === byXff ? byForwarded : peer;
    return byForwarded ?? byXff ?? peer;
  } catch {
    return peer;
  }
}

/**
 * One entry of --oauth-cimd-dns-servers: `IP`, `IPv4:port`, `[IPv6]` or `[IPv6]:port` (the forms
 * node:dns setServers takes); the problem with it, or null.
 */
export function nameServerProblem(entry: string): string | null {
  const port = /^(?:\d+\.\d+\.\d+\.\d+|\[[^\]]*\]):(\d+)$/.exec(entry)?.[1];
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return 'has a port outside 1-65535';
  if (entry.includes('%') || parseNode(entry) === null) return 'must be a name server address: IP, IPv4:port, [IPv6] or [IPv6]:port';
  return null;
}
