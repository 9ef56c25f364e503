/**
 * The egress policy, pure: host normalisation, rule compilation and matching, the CONNECT target
 * and the decisions the proxy takes before any DNS lookup (which host and port a rule grants) and
 * after it (no private address without allowPrivate). The rules are in ../egress.ts's header.
 */
import net from 'node:net';
import { isPrivateAddress, parseIPv4, parseIPv6 } from './address.js';

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

export type HostKind = 'name' | 'ip';
export interface ParsedHost {
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
export function normaliseHost(raw: string): ParsedHost | string {
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

export interface CompiledRule {
  /** As given, for reasons. */
  label: string;
  kind: 'name' | 'ip' | 'wildcard';
  /** Name, ip key, or wildcard suffix including the leading dot. */
  key: string;
  ports: ReadonlySet<number>;
  allowPrivate: boolean;
}

export function validPort(p: unknown): p is number {
  return typeof p === 'number' && Number.isInteger(p) && p >= 1 && p <= 65535;
}

export function compileRules(rules: readonly EgressRule[]): CompiledRule[] {
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

export function ruleMatches(rule: CompiledRule, h: ParsedHost): boolean {
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
export function parseAuthority(target: string): { host: ParsedHost; port: number } | string {
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

export function sanitise(s: string): string {
  return s.replace(/[^\x21-\x7e]/g, '?').slice(0, 255);
}

/** What the policy says of a CONNECT target before anything is resolved. */
export type ConnectVerdict =
  /** 400: the target is not a valid host:port (host is a sanitised copy of the target). */
  | { verdict: 'malformed'; status: 400; reason: string; host: string; port: 0 }
  /** 403: no rule names the host, or none of those that do lists the port. */
  | { verdict: 'refused'; status: 403; reason: string; host: ParsedHost; port: number }
  /** Granted: resolve (unless an IP literal), then check the addresses with allowPrivate. */
  | { verdict: 'granted'; host: ParsedHost; port: number; allowPrivate: boolean; rule: CompiledRule };

/**
 * Decides a CONNECT target against compiled rules: grants add up over every rule matching the host
 * (allowed if any of them lists the port; private addresses allowed if any such rule has allowPrivate).
 */
export function decideConnect(rules: readonly CompiledRule[], target: string): ConnectVerdict {
  const parsed = parseAuthority(target);
  if (typeof parsed === 'string') return { verdict: 'malformed', status: 400, reason: `malformed CONNECT target: ${parsed}`, host: sanitise(target), port: 0 };
  const { host, port } = parsed;
  const byHost = rules.filter((r) => ruleMatches(r, host));
  if (byHost.length === 0) {
    return { verdict: 'refused', status: 403, reason: host.kind === 'ip' ? 'IP address not named by any rule' : 'host not in the allowed registries', host, port };
  }
  const byPort = byHost.filter((r) => r.ports.has(port));
  if (byPort.length === 0) return { verdict: 'refused', status: 403, reason: `port ${port} not allowed for this host`, host, port };
  const allowPrivate = byPort.some((r) => r.allowPrivate);
  const rule = byPort.find((r) => r.allowPrivate === allowPrivate) ?? byPort[0]!;
  return { verdict: 'granted', host, port, allowPrivate, rule };
}

/**
 * After resolving: why the addresses may not be used (502 none usable, 403 a private one without
 * allowPrivate), or null. ANY private address refuses the whole name.
 */
export function addressRefusal(addresses: unknown, allowPrivate: boolean): { status: 403 | 502; reason: string } | null {
  if (!Array.isArray(addresses) || addresses.length === 0 || !addresses.every((a) => typeof a === 'string' && net.isIP(a) !== 0)) {
    return { status: 502, reason: 'no usable address for the host' };
  }
  if (!allowPrivate) {
    const bad = (addresses as string[]).find((a) => isPrivateAddress(a));
    if (bad !== undefined) return { status: 403, reason: `host resolves to a private address (${bad})` };
  }
  return null;
}

/**
 * A request other than CONNECT: 400 when it is not in absolute (proxy) form, else 403 (only TLS
 * through CONNECT leaves the sandbox), with the host and port it named for the decision log.
 */
export function decidePlainRequest(target: string): { status: 400 | 403; reason: string; host: string; port: number } {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(target)) return { status: 400, reason: 'malformed request: not a proxy request', host: '', port: 0 };
  let host = sanitise(target);
  let port = 0;
  try {
    const url = new URL(target);
    host = sanitise(url.hostname);
    port = url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : url.protocol === 'http:' ? 80 : 0;
  } catch {
    // Keep the sanitised target as the host.
  }
  return { status: 403, reason: 'plain HTTP is not allowed, only TLS through CONNECT', host, port };
}
