import { describe, expect, it } from 'vitest';
import { isPrivateAddress } from '../../src/sandbox/egress/address.js';
import { errorAnswer, RequestHeadReader } from '../../src/sandbox/egress/http.js';
import { TunnelSlots } from '../../src/sandbox/egress/connect.js';
import { addressRefusal, compileRules, decideConnect, decidePlainRequest, DEFAULT_REGISTRY_RULES, normaliseHost, type EgressRule } from '../../src/sandbox/egress/policy.js';

const rules = (r: EgressRule[]) => compileRules(r);
const verdict = (r: EgressRule[], target: string) => decideConnect(rules(r), target);
const defaults = compileRules(DEFAULT_REGISTRY_RULES);

describe('host normalisation', () => {
  it('lowercases names, drops ONE trailing dot, canonicalises IPv6', () => {
    expect(normaliseHost('Registry.NPMJS.org.')).toEqual({ kind: 'name', host: 'registry.npmjs.org', key: 'registry.npmjs.org' });
    expect(normaliseHost('registry.npmjs.org..')).toBe('empty or overlong label in host');
    expect(normaliseHost('[0:0::1]')).toMatchObject({ kind: 'ip', host: '::1' });
    expect(normaliseHost('[::FFFF:127.0.0.1]')).toMatchObject({ kind: 'ip', host: '::ffff:7f00:1' });
    expect(normaliseHost('10.0.0.1')).toMatchObject({ kind: 'ip', host: '10.0.0.1', key: '0a000001' });
    // 253 characters is the longest name, also with its trailing dot.
    const longest = ('a'.repeat(63) + '.').repeat(3) + 'b'.repeat(57) + '.com';
    expect(longest.length).toBe(253);
    expect(normaliseHost(longest + '.')).toMatchObject({ kind: 'name', host: longest });
  });

  it('refuses hostile and ambiguous hosts', () => {
    const bad: Array<[string, RegExp]> = [
      ['', /empty/],
      ['..', /label/],
      ['.', /length/],
      ['a..b', /label/],
      ['../etc/passwd', /characters/],
      ['user@host', /userinfo/],
      ['-a.com', /"-"/],
      ['a-.com', /"-"/],
      ['ex\u212Aample.com', /characters/], // Kelvin sign: checked before lowercasing
      ['exämple.com', /characters/],
      ['a b.com', /characters/],
      ['a_b.com', /characters/],
      ['127.1', /numeric/],
      ['2130706433', /numeric/],
      ['example.0x7f', /numeric/],
      ['010.0.0.1', /numeric/],
      ['[fe80::1%eth0]', /zone/],
      ['[::1', /IPv6/],
      ['[not-v6]', /IPv6/],
      ['::1', /characters/], // unbracketed IPv6 in a request
      ['a'.repeat(64) + '.com', /label/],
      [('a'.repeat(63) + '.').repeat(3) + 'b'.repeat(58) + '.com', /invalid host length/], // 254 characters
      ['x'.repeat(100_000), /too long/],
    ];
    for (const [raw, why] of bad) expect(normaliseHost(raw), raw.slice(0, 40)).toMatch(why);
  });
});

describe('rules', () => {
  it('compiles exact names, IP literals (v6 with or without brackets) and wildcards; refuses bad ones', () => {
    expect(rules([{ host: '*.example.com' }])[0]).toMatchObject({ kind: 'wildcard', key: '.example.com' });
    expect(rules([{ host: '::1' }])[0]).toMatchObject({ kind: 'ip' });
    expect(rules([{ host: '[::1]' }])[0]!.key).toBe(rules([{ host: '0::1' }])[0]!.key);
    expect(() => rules([{ host: '*.com' }])).toThrow(/two labels/);
    expect(() => rules([{ host: '*.*.example.com' }])).toThrow(/wildcard/);
    expect(() => rules([{ host: '*.10.0.0.1' }])).toThrow(/wildcard/);
    expect(() => rules([{ host: 'a.com', ports: [] }])).toThrow(/ports/);
    expect(() => rules([{ host: 'a.com', ports: [0] }])).toThrow(/ports/);
    expect(() => rules([{ host: 'a.com', ports: [65536] }])).toThrow(/ports/);
    expect(() => rules([{ host: 'a.com', ports: [443.5] }])).toThrow(/ports/);
    expect(() => rules([{ host: 'a.com', allowPrivate: 'yes' as never }])).toThrow(/allowPrivate/);
    expect(() => rules([{ host: 5 as never }])).toThrow(/host must be a string/);
    expect(() => rules('a.com' as never)).toThrow(/array/);
    expect(() => rules([{ host: 'a..com' }])).toThrow(/egress rule 0/);
  });
});

describe('CONNECT decisions before any lookup', () => {
  it('grants a default registry on 443 only, whatever the case and one trailing dot', () => {
    for (const t of ['registry.npmjs.org:443', 'REGISTRY.npmjs.ORG:443', 'registry.npmjs.org.:443', 'files.pythonhosted.org:443']) {
      expect(decideConnect(defaults, t), t).toMatchObject({ verdict: 'granted', allowPrivate: false });
    }
    expect(decideConnect(defaults, 'registry.npmjs.org.:443')).toMatchObject({ host: { host: 'registry.npmjs.org' }, port: 443 });
    expect(decideConnect(defaults, 'registry.npmjs.org:80')).toMatchObject({ verdict: 'refused', status: 403, reason: 'port 80 not allowed for this host' });
    expect(decideConnect(defaults, 'registry.npmjs.org.evil.com:443')).toMatchObject({ verdict: 'refused', reason: 'host not in the allowed registries' });
    expect(decideConnect(defaults, 'evilregistry.npmjs.org:443')).toMatchObject({ verdict: 'refused' });
    expect(decideConnect(defaults, 'npmjs.org:443')).toMatchObject({ verdict: 'refused' });
  });

  it('a wildcard matches names below its apex at any depth, never the apex, never an IP', () => {
    const r: EgressRule[] = [{ host: '*.example.com' }];
    expect(verdict(r, 'a.example.com:443').verdict).toBe('granted');
    expect(verdict(r, 'a.b.c.example.com:443').verdict).toBe('granted');
    expect(verdict(r, 'example.com:443').verdict).toBe('refused');
    expect(verdict(r, 'aexample.com:443').verdict).toBe('refused');
    expect(verdict(r, 'example.com.evil.org:443').verdict).toBe('refused');
  });

  it('an IP literal matches only a rule naming that exact IP, compared by value', () => {
    const r: EgressRule[] = [{ host: '::1', ports: [8443], allowPrivate: true }, { host: '203.0.113.5' }];
    expect(verdict(r, '[0:0:0:0:0:0:0:1]:8443')).toMatchObject({ verdict: 'granted', allowPrivate: true });
    expect(verdict(r, '[::1]:443')).toMatchObject({ verdict: 'refused', reason: 'port 443 not allowed for this host' });
    expect(verdict(r, '203.0.113.5:443').verdict).toBe('granted');
    expect(verdict(r, '203.0.113.6:443')).toMatchObject({ verdict: 'refused', reason: 'IP address not named by any rule' });
    expect(verdict(r, '[::ffff:203.0.113.5]:443').verdict).toBe('refused'); // a mapped form is another literal
    expect(verdict([{ host: '*.example.com' }], '127.0.0.1:443')).toMatchObject({ verdict: 'refused', reason: 'IP address not named by any rule' });
  });

  it('grants add up over every matching rule; allowPrivate only from a rule that lists the port', () => {
    const r: EgressRule[] = [
      { host: 'git.internal.test', ports: [443] },
      { host: 'git.internal.test', ports: [8443], allowPrivate: true },
      { host: '*.internal.test', ports: [9000] },
    ];
    expect(verdict(r, 'git.internal.test:443')).toMatchObject({ verdict: 'granted', allowPrivate: false, rule: { label: 'git.internal.test' } });
    expect(verdict(r, 'git.internal.test:8443')).toMatchObject({ verdict: 'granted', allowPrivate: true });
    expect(verdict(r, 'git.internal.test:9000')).toMatchObject({ verdict: 'granted', allowPrivate: false, rule: { label: '*.internal.test' } });
    expect(verdict(r, 'git.internal.test:22').verdict).toBe('refused');
  });

  it('malformed targets are 400 with a sanitised, truncated host', () => {
    const bad = [
      'registry.npmjs.org',
      'registry.npmjs.org:',
      'registry.npmjs.org:0',
      'registry.npmjs.org:65536',
      'registry.npmjs.org:+443',
      'registry.npmjs.org:0443x',
      'registry.npmjs.org:443:443',
      'user@registry.npmjs.org:443',
      '::1:443',
      '[::1]443',
      '[::1]:',
      '[fe80::1%25eth0]:443',
      '..:443',
      'a..b:443',
      '../../x:443',
      '127.1:443',
      'http://registry.npmjs.org:443',
    ];
    for (const t of bad) {
      const v = verdict([{ host: 'registry.npmjs.org' }], t);
      expect(v, t).toMatchObject({ verdict: 'malformed', status: 400, port: 0 });
      expect(v.reason, t).toMatch(/^malformed CONNECT target: /);
    }
    const huge = verdict([], '\u0001' + 'a'.repeat(10_000) + ':443');
    expect(huge).toMatchObject({ verdict: 'malformed' });
    expect((huge.host as string).length).toBe(255);
    expect(huge.host).toMatch(/^\?a+$/);
  });

  it('with no rules nothing is granted', () => {
    expect(verdict([], 'registry.npmjs.org:443').verdict).toBe('refused');
  });
});

describe('decisions after the lookup', () => {
  it('refuses a name if ANY address is private, unless allowPrivate; refuses unusable answers', () => {
    expect(addressRefusal(['104.16.0.1', '2606:4700::1'], false)).toBeNull();
    expect(addressRefusal(['104.16.0.1', '10.0.0.5'], false)).toEqual({ status: 403, reason: 'host resolves to a private address (10.0.0.5)' });
    expect(addressRefusal(['104.16.0.1', '10.0.0.5'], true)).toBeNull();
    expect(addressRefusal(['::ffff:169.254.169.254'], false)).toMatchObject({ status: 403 });
    expect(addressRefusal(['64:ff9b::10.0.0.1'], false)).toMatchObject({ status: 403 });
    for (const junk of [[], null, 'a', ['not-an-ip'], ['104.16.0.1', 5], [' 1.2.3.4']]) {
      expect(addressRefusal(junk, true), JSON.stringify(junk)).toEqual({ status: 502, reason: 'no usable address for the host' });
    }
  });

  it('private ranges fail closed, documentation ranges are public', () => {
    for (const ip of ['127.0.0.1', '10.1.2.3', '172.16.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '255.255.255.255', '::1', '::', 'fe80::1', 'fc00::1', '2002:a00:1::', '2001::1', '[::1]', '127.1', 'fe80::1%eth0', 'localhost', '']) {
      expect(isPrivateAddress(ip), ip).toBe(true);
    }
    for (const ip of ['8.8.8.8', '203.0.113.80', '198.51.100.1', '2606:4700::1', '2001:db8::1', '[2606:4700::1]']) expect(isPrivateAddress(ip), ip).toBe(false);
  });
});

describe('plain requests', () => {
  it('are 403 with the host and port they named, or 400 when not in proxy form', () => {
    expect(decidePlainRequest('http://Example.com/x')).toEqual({ status: 403, reason: 'plain HTTP is not allowed, only TLS through CONNECT', host: 'example.com', port: 80 });
    expect(decidePlainRequest('https://example.com:8443/')).toMatchObject({ status: 403, host: 'example.com', port: 8443 });
    expect(decidePlainRequest('ftp://example.com/')).toMatchObject({ status: 403, port: 0 });
    expect(decidePlainRequest('/index.html')).toEqual({ status: 400, reason: 'malformed request: not a proxy request', host: '', port: 0 });
    expect(decidePlainRequest('http://[::1')).toMatchObject({ status: 403, host: 'http://[::1', port: 0 });
    expect(decidePlainRequest('http://' + 'a'.repeat(5000)).host.length).toBeLessThanOrEqual(255);
  });
});

describe('request head reader', () => {
  const read = (max: number, ...chunks: Array<string | Buffer>) => {
    const r = new RequestHeadReader(max);
    let last;
    for (const c of chunks) last = r.push(typeof c === 'string' ? Buffer.from(c, 'latin1') : c);
    return last!;
  };

  it('reads a head in any chunking and keeps what follows it', () => {
    const head = 'CONNECT registry.npmjs.org:443 HTTP/1.1\r\nHost: registry.npmjs.org:443\r\n\r\n';
    const chunks = [...head, 'TLS'].map((c) => c);
    const r = new RequestHeadReader(16 * 1024);
    let s;
    for (const c of chunks) s = r.push(Buffer.from(c));
    expect(s).toMatchObject({ state: 'done', method: 'CONNECT', target: 'registry.npmjs.org:443' });
    const once = read(16 * 1024, head + 'TLS');
    expect(once.state === 'done' && once.rest.toString()).toBe('TLS');
    expect(read(16 * 1024, 'CONNECT a.b:443 HTTP/1.1\r\n')).toEqual({ state: 'more' });
  });

  it('refuses binary at its first byte, bare LF, and bad request or header lines', () => {
    expect(read(16 * 1024, Buffer.from([0x16, 0x03, 0x01, 0x00]))).toMatchObject({ state: 'error', status: 400, reason: /invalid bytes/ });
    expect(read(16 * 1024, 'CONNECT a.b:443 HTTP/1.1\nHost: x\n\n')).toMatchObject({ state: 'error', status: 400 });
    expect(read(16 * 1024, 'CONNECT a.b:443 HTTP/1.1\r\nHost: \u00ff\r\n\r\n')).toMatchObject({ state: 'error', reason: /invalid bytes/ });
    expect(read(16 * 1024, 'CONNECT  a.b:443 HTTP/1.1\r\n\r\n')).toMatchObject({ state: 'error', reason: 'malformed request line', method: '' });
    expect(read(16 * 1024, 'CONNECT a.b:443 HTTP/2\r\n\r\n')).toMatchObject({ state: 'error', reason: 'malformed request line' });
    expect(read(16 * 1024, 'CONNECT a.b:443 HTTP/1.1\r\nNo colon here\r\n\r\n')).toMatchObject({ state: 'error', reason: 'malformed header line', method: 'CONNECT' });
    expect(read(16 * 1024, 'CONNECT a.b:443 HTTP/1.1\r\n Folded: x\r\n\r\n')).toMatchObject({ state: 'error', reason: 'malformed header line' });
  });

  it('refuses a huge header line as soon as the cap is passed, without waiting for its end', () => {
    const r = new RequestHeadReader(1024);
    expect(r.push(Buffer.from('CONNECT a.b:443 HTTP/1.1\r\nX: '))).toEqual({ state: 'more' });
    expect(r.push(Buffer.alloc(900, 0x61))).toEqual({ state: 'more' });
    expect(r.push(Buffer.alloc(200, 0x61))).toEqual({ state: 'error', status: 431, reason: 'request header too large', method: '' });
    // A complete head one byte over the cap is refused too; at the cap it is fine.
    const line = (n: number) => 'CONNECT a.b:443 HTTP/1.1\r\nX: ' + 'a'.repeat(n) + '\r\n\r\n';
    const atCap = line(1024 - line(0).length);
    expect(atCap.length).toBe(1024);
    expect(read(1024, atCap).state).toBe('done');
    expect(read(1024, line(1025 - line(0).length))).toMatchObject({ state: 'error', status: 431 });
    // A megabyte in one chunk is scanned only up to the cap.
    expect(read(16 * 1024, 'CONNECT a.b:443 HTTP/1.1\r\nX: ' + 'a'.repeat(1_000_000))).toMatchObject({ status: 431 });
  });

  it('error answers are short text bodies that close the connection', () => {
    const a = errorAnswer(403, 'host not in the allowed registries');
    expect(a).toMatch(/^HTTP\/1\.1 403 Forbidden\r\n/);
    expect(a).toContain('Connection: close\r\n');
    expect(a.endsWith('\r\n\r\natelier egress: host not in the allowed registries\n')).toBe(true);
    expect(a).toContain(`Content-Length: ${Buffer.byteLength('atelier egress: host not in the allowed registries\n')}`);
    expect(errorAnswer(418, 'x')).toMatch(/^HTTP\/1\.1 418 Error\r\n/);
  });
});

describe('tunnel slots', () => {
  it('caps concurrent tunnels; a release is idempotent', () => {
    const s = new TunnelSlots(2);
    const a = s.take()!;
    const b = s.take()!;
    expect(s.take()).toBeNull();
    a();
    a();
    expect(s.active).toBe(1);
    expect(s.take()).not.toBeNull();
    b();
    expect(s.active).toBe(1);
  });
});
