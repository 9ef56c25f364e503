/**
 * Address literals of the egress policy: strict IPv4 and IPv6 parsing (to bytes) and the private
 * ranges a target may not be in without allowPrivate. Pure.
 */
import net from 'node:net';

/** Strict dotted-decimal IPv4 to 4 bytes, or null. */
export function parseIPv4(s: string): number[] | null {
  if (!net.isIPv4(s)) return null;
  return s.split('.').map(Number);
}

/** IPv6 (no brackets, no zone id) to 16 bytes, or null. */
export function parseIPv6(s: string): number[] | null {
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
