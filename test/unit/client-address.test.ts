/**
 * The client address behind trusted reverse proxies (issue #42 item 11, src/core/client-address.ts):
 * the right-most untrusted hop of Forwarded / X-Forwarded-For when the peer is trusted, the peer
 * otherwise; hostile headers never throw and fall back to an address that was seen. The service's
 * own use of it is tried in test/e2e/reverse-proxy.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { clientAddress, MAX_HOPS, nameServerProblem, parseNode, trustedProxyProblem } from '../../src/core/client-address.js';
import { loadConfig } from '../../src/core/config.js';

const req = (peer: string | undefined, headers: Record<string, string | string[]> = {}) => ({ socket: { remoteAddress: peer }, headers }) as never;
const TRUST = ['127.0.0.1', '10.0.0.0/8', 'fd00::/8'];

describe('clientAddress', () => {
  it('no trusted proxies, or an untrusted peer: the peer, whatever the headers say', () => {
    expect(clientAddress(req('127.0.0.1', { 'x-forwarded-for': '203.0.113.5' }), [])).toBe('127.0.0.1');
    expect(clientAddress(req('198.51.100.7', { 'x-forwarded-for': '203.0.113.5', forwarded: 'for=203.0.113.6' }), TRUST)).toBe('198.51.100.7');
    expect(clientAddress(req('::ffff:198.51.100.7', { 'x-forwarded-for': '203.0.113.5' }), TRUST)).toBe('198.51.100.7');
    expect(clientAddress(req(undefined, { 'x-forwarded-for': '203.0.113.5' }), TRUST)).toBe('unknown');
  });

  it('a trusted peer: the right-most untrusted hop; hops a client wrote itself (to the left) are never reached', () => {
    expect(clientAddress(req('127.0.0.1', { 'x-forwarded-for': '203.0.113.5' }), TRUST)).toBe('203.0.113.5');
    expect(clientAddress(req('::ffff:127.0.0.1', { 'x-forwarded-for': '1.1.1.1, 203.0.113.5' }), TRUST)).toBe('203.0.113.5');
    expect(clientAddress(req('127.0.0.1', { 'x-forwarded-for': '1.1.1.1, 203.0.113.5, 10.1.2.3' }), TRUST)).toBe('203.0.113.5');
    expect(clientAddress(req('10.9.9.9', { 'x-forwarded-for': ['1.1.1.1', '203.0.113.5, 10.1.2.3'] }), TRUST)).toBe('203.0.113.5');
    expect(clientAddress(req('127.0.0.1', { forwarded: 'for=1.1.1.1, for=203.0.113.5;proto=https;by=10.0.0.1' }), TRUST)).toBe('203.0.113.5');
    // Every hop trusted: the left-most.
    expect(clientAddress(req('127.0.0.1', { 'x-forwarded-for': '10.0.0.2, 10.0.0.3' }), TRUST)).toBe('10.0.0.2');
    // No header: the peer itself.
    expect(clientAddress(req('127.0.0.1'), TRUST)).toBe('127.0.0.1');
  });

  it('IPv6 with brackets, ports and zones; IPv4 with ports; quoted Forwarded values', () => {
    expect(clientAddress(req('127.0.0.1', { 'x-forwarded-for': '[2001:DB8::17]:4711' }), TRUST)).toBe('2001:db8::17');
    expect(clientAddress(req('127.0.0.1', { 'x-forwarded-for': '2001:db8::17' }), TRUST)).toBe('2001:db8::17');
    expect(clientAddress(req('127.0.0.1', { 'x-forwarded-for': '203.0.113.5:8080' }), TRUST)).toBe('203.0.113.5');
    expect(clientAddress(req('127.0.0.1', { 'x-forwarded-for': 'fe80::1%eth0' }), TRUST)).toBe('fe80::1');
    expect(clientAddress(req('127.0.0.1', { forwarded: 'For="[2001:db8:cafe::17]:4711"' }), TRUST)).toBe('2001:db8:cafe::17');
    expect(clientAddress(req('127.0.0.1', { forwarded: 'for="203.0.113.5:47011";host="a,b;c"' }), TRUST)).toBe('203.0.113.5');
    expect(clientAddress(req('fd12::1', { forwarded: 'for="[fd00::9]", for="[2001:db8::1]", for="[fd00::2]"' }), TRUST)).toBe('2001:db8::1');
  });

  it('unreadable hops end the walk at the last trusted one (the proxy that reported it)', () => {
    const cases: Array<[Record<string, string>, string]> = [
      [{ 'x-forwarded-for': 'garbage' }, '127.0.0.1'],
      [{ 'x-forwarded-for': '203.0.113.5, garbage, 10.0.0.7' }, '10.0.0.7'],
      [{ 'x-forwarded-for': '' }, '127.0.0.1'],
      [{ 'x-forwarded-for': ',,,' }, '127.0.0.1'],
      [{ 'x-forwarded-for': '203.0.113.5:99999' }, '127.0.0.1'],
      [{ 'x-forwarded-for': '[203.0.113.5]' }, '127.0.0.1'],
      [{ 'x-forwarded-for': '[2001:db8::1' }, '127.0.0.1'],
      [{ 'x-forwarded-for': '01.2.3.4' }, '127.0.0.1'],
      [{ 'x-forwarded-for': '1.2.3.4.5' }, '127.0.0.1'],
      [{ 'x-forwarded-for': '\u0000\u202e' }, '127.0.0.1'],
      [{ forwarded: 'for=unknown' }, '127.0.0.1'],
      [{ forwarded: 'for=_hidden, for=10.0.0.4' }, '10.0.0.4'],
      [{ forwarded: 'for="_SEVKISEK"' }, '127.0.0.1'],
      [{ forwarded: 'for=203.0.113.5;for=203.0.113.6' }, '127.0.0.1'],
      [{ forwarded: 'proto=https' }, '127.0.0.1'],
      [{ forwarded: 'for="203.0.113.5' }, '127.0.0.1'],
      [{ forwarded: 'for=203.0.113.9, for="[2001:db8::1' }, '127.0.0.1'],
      [{ forwarded: 'for="\\"\\\\"' }, '127.0.0.1'],
      [{ forwarded: ';;;,,,===""' }, '127.0.0.1'],
      [{ forwarded: 'for=' + 'a'.repeat(100_000) }, '127.0.0.1'],
    ];
    for (const [headers, want] of cases) expect(clientAddress(req('127.0.0.1', headers), TRUST), JSON.stringify(headers).slice(0, 80)).toBe(want);
  });

  it('both headers: used when they agree, the peer when they do not (a proxy may pass one through untouched)', () => {
    expect(clientAddress(req('127.0.0.1', { forwarded: 'for=203.0.113.5', 'x-forwarded-for': '203.0.113.5' }), TRUST)).toBe('203.0.113.5');
    expect(clientAddress(req('127.0.0.1', { forwarded: 'for=198.51.100.1', 'x-forwarded-for': '203.0.113.5' }), TRUST)).toBe('127.0.0.1');
  });

  it('thousands of hops cost MAX_HOPS at most; a long chain of trusted hops ends at the last one read', () => {
    const many = Array.from({ length: 5000 }, (_, i) => `198.51.${(i >> 8) & 255}.${i & 255}`).join(', ');
    const t0 = performance.now();
    expect(clientAddress(req('127.0.0.1', { 'x-forwarded-for': `${many}, 203.0.113.5` }), TRUST)).toBe('203.0.113.5');
    expect(clientAddress(req('127.0.0.1', { forwarded: many.split(', ').map((a) => `for=${a}`).join(', ') }), TRUST)).toMatch(/^198\.51\./);
    const trustedChain = Array.from({ length: MAX_HOPS + 10 }, (_, i) => `10.0.0.${i + 1}`);
    expect(clientAddress(req('127.0.0.1', { 'x-forwarded-for': ['203.0.113.5', ...trustedChain].join(', ') }), TRUST)).toBe(trustedChain[trustedChain.length - MAX_HOPS]);
    expect(performance.now() - t0).toBeLessThan(500);
  });
});

describe('the settings', () => {
  it('parseNode takes what proxies write and nothing else', () => {
    expect(parseNode('203.0.113.5')).toBe('203.0.113.5');
    expect(parseNode('[::1]:80')).toBe('::1');
    expect(parseNode('::ffff:203.0.113.5')).toBe('203.0.113.5');
    for (const bad of ['', 'x', '[::1]:', '[::1]:70000', '1.2.3.4:', 'localhost', '203.0.113.5 extra']) expect(parseNode(bad), bad).toBeNull();
  });

  it('--trusted-proxies and --oauth-cimd-dns-servers: a bad entry stops start-up naming the setting and the entry', () => {
    expect(trustedProxyProblem('10.0.0.0/8')).toBeNull();
    expect(trustedProxyProblem('2001:db8::/32')).toBeNull();
    expect(trustedProxyProblem('10.0.0.0/33')).toMatch(/prefix length over 32/);
    expect(trustedProxyProblem('[::1]')).toMatch(/IP address or a CIDR/);
    expect(nameServerProblem('127.0.0.1:5353')).toBeNull();
    expect(nameServerProblem('[::1]:53')).toBeNull();
    expect(nameServerProblem('127.0.0.1:0')).toMatch(/port outside/);
    expect(nameServerProblem('dns.example')).toMatch(/name server address/);
    const env = { ATELIER_DATA_DIR: '/nonexistent-atelier-test-dir' };
    expect(loadConfig([], { ...env, ATELIER_TRUSTED_PROXIES: '127.0.0.1, 10.0.0.0/8 ,fd00::/8' }).trustedProxies).toEqual(['127.0.0.1', '10.0.0.0/8', 'fd00::/8']);
    expect(() => loadConfig(['--trusted-proxies', '127.0.0.1,proxy.internal'], env)).toThrow(/invalid setting --trusted-proxies \/ ATELIER_TRUSTED_PROXIES: "proxy\.internal" must be an IP address or a CIDR/);
    expect(() => loadConfig([], { ...env, ATELIER_TRUSTED_PROXIES: '10.0.0.0/40' })).toThrow(/--trusted-proxies .*"10\.0\.0\.0\/40" has a prefix length over 32/);
    expect(() => loadConfig(['--oauth-cimd-dns-servers', '127.0.0.1:99999'], env)).toThrow(/invalid setting --oauth-cimd-dns-servers \/ ATELIER_OAUTH_CIMD_DNS_SERVERS: "127\.0\.0\.1:99999" has a port outside 1-65535/);
    expect(() => loadConfig(['--oauth-cimd-fetches-per-minute', '0'], env)).toThrow(/--oauth-cimd-fetches-per-minute/);
  });
});
