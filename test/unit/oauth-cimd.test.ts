/**
 * OAuth Client ID Metadata Documents (issue #32 item 1), the pure rules and the fetch: the client_id
 * URL form, which addresses may be fetched from, the HTTP caching rules with their floor and
 * ceiling, the document's checks, and a fetch that connects to exactly the address it checked
 * (one resolution, no DNS rebinding). The service-level behaviour is test/e2e/oauth-cimd.test.ts.
 * Issue #42 item 4: the bounded resolver, slots held until a lookup really ends, and the per-address
 * limit (the service under a silent name server: test/e2e/oauth-cimd-dns.test.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { createSocket } from 'node:dgram';
import {
  boundedResolver,
  cachePolicy,
  CIMD_MAX_CONCURRENT,
  CimdAddressLimit,
  CIMD_FRESH_CEILING_MS,
  CIMD_FRESH_FLOOR_MS,
  CimdFailure,
  CimdFetcher,
  clientIdUrlProblem,
  fetchableAddress,
  validateDocument,
} from '../../src/mcp/oauth/cimd.js';
import { CIMD_TEST_NAME, cimdDocument, startCimdHost, type CimdHost } from '../fixtures/cimd-host.js';

describe('client_id URL form', () => {
  it('takes https URLs in normal form with a path', () => {
    for (const u of ['https://app.example/client.json', 'https://app.example:8443/oauth/client', 'https://app.example/c?v=1', 'https://127.0.0.1:9/x', 'https://[::1]:9/x'])
      expect(clientIdUrlProblem(u), u).toBeNull();
  });
  it('refuses everything else, naming the rule', () => {
    const cases: Array<[string, RegExp]> = [
      ['http://app.example/client.json', /https/],
      ['https://app.example', /path/],
      ['https://app.example/', /path/],
      ['https://app.example/a/../client.json', /"\." or "\.\."/],
      ['https://app.example/a/%2e%2E/client.json', /"\." or "\.\."/],
      ['https://app.example/./client.json', /"\." or "\.\."/],
      ['https://user@app.example/client.json', /user name/],
      ['https://user:pw@app.example/client.json', /user name/],
      ['https://app.example/client.json#x', /fragment/],
      ['https://App.Example/client.json', /normal form "https:\/\/app\.example\/client\.json"/],
      ['https://app.example:443/client.json', /normal form/],
      ['https://app.example/c\u202Elient.json', /ASCII/],
      ['https://app.example/c lient.json', /ASCII/],
      ['https://' + 'a'.repeat(2000) + '.example/x', /too long/],
      ['https://[::ffff:127.0.0.1]/x', /normal form "https:\/\/\[::ffff:7f00:1\]\/x"/],
    ];
    for (const [u, why] of cases) expect(clientIdUrlProblem(u), u).toMatch(why);
  });
});

describe('addresses a document may be fetched from', () => {
  it('public addresses only; loopback only when allowed; never other private ranges', () => {
    for (const a of ['93.184.216.34', '2606:2800:220:1:248:1893:25c8:1946', '203.0.113.9']) expect(fetchableAddress(a, false), a).toBe(true);
    const privateOnes = ['10.0.0.1', '172.16.3.4', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '224.0.0.1', '255.255.255.255', '::', 'fe80::1', 'fc00::1', 'ff02::1', '::ffff:10.0.0.1', '::ffff:169.254.169.254', '64:ff9b::a00:1', 'fe80::1%eth0', '127.1'];
    for (const a of privateOnes) {
      expect(fetchableAddress(a, false), a).toBe(false);
      expect(fetchableAddress(a, true), a).toBe(false);
    }
    for (const a of ['127.0.0.1', '127.5.6.7', '::1', '::ffff:127.0.0.1']) {
      expect(fetchableAddress(a, false), a).toBe(false);
      expect(fetchableAddress(a, true), a).toBe(true);
    }
  });
});

describe('HTTP caching rules', () => {
  const now = Date.parse('2026-08-01T12:00:00Z');
  const fresh = (h: Record<string, string>) => {
    const c = cachePolicy(h, now);
    return c.freshUntil === null ? 0 : Date.parse(c.freshUntil) - now;
  };
  it('no-store keeps nothing, not even validators', () => {
    expect(cachePolicy({ 'cache-control': 'no-store, max-age=600', etag: '"v1"', 'last-modified': 'Sat, 01 Aug 2026 10:00:00 GMT' }, now)).toEqual({ freshUntil: null, etag: null, lastModified: null, cacheControl: null });
  });
  it('no-cache, max-age=0, an Expires not after Date, an unparseable Expires, Pragma: no-cache, an Age past the lifetime: revalidate at every use', () => {
    expect(fresh({ 'cache-control': 'no-cache', etag: '"v1"' })).toBe(0);
    expect(cachePolicy({ 'cache-control': 'no-cache', etag: '"v1"' }, now).etag).toBe('"v1"');
    expect(fresh({ 'cache-control': 'max-age=0' })).toBe(0);
    expect(fresh({ expires: 'Sat, 01 Aug 2026 11:00:00 GMT', date: 'Sat, 01 Aug 2026 12:00:00 GMT' })).toBe(0);
    expect(fresh({ expires: '0' })).toBe(0);
    expect(fresh({ pragma: 'no-cache' })).toBe(0);
    expect(fresh({ 'cache-control': 'max-age=100', age: '100' })).toBe(0);
    expect(fresh({ 'cache-control': 'max-age=nonsense' })).toBe(0);
  });
  it('any other lifetime is bounded by the floor and the ceiling; no information gets the floor', () => {
    expect(fresh({ 'cache-control': 'max-age=600' })).toBe(600_000);
    expect(fresh({ 'cache-control': 'public, MAX-AGE="600"' })).toBe(600_000);
    expect(fresh({ 'cache-control': 'max-age=700', age: '100' })).toBe(600_000);
    expect(fresh({ 'cache-control': 'max-age=5' })).toBe(CIMD_FRESH_FLOOR_MS);
    expect(fresh({ 'cache-control': 'max-age=999999999999' })).toBe(CIMD_FRESH_CEILING_MS);
    expect(fresh({ expires: 'Sat, 01 Aug 2026 12:10:00 GMT', date: 'Sat, 01 Aug 2026 12:00:00 GMT' })).toBe(600_000);
    expect(fresh({ 'cache-control': 'max-age=600', expires: 'Sat, 01 Aug 2026 11:00:00 GMT' })).toBe(600_000);
    expect(fresh({})).toBe(CIMD_FRESH_FLOOR_MS);
    expect(fresh({ 'cache-control': 'private' })).toBe(CIMD_FRESH_FLOOR_MS);
  });
  it('keeps only well-formed validators', () => {
    expect(cachePolicy({ etag: 'W/"abc"', 'last-modified': 'Sat, 01 Aug 2026 10:00:00 GMT' }, now)).toMatchObject({ etag: 'W/"abc"', lastModified: 'Sat, 01 Aug 2026 10:00:00 GMT' });
    expect(cachePolicy({ etag: 'abc\r\nX-Injected: 1', 'last-modified': 'yesterday' }, now)).toMatchObject({ etag: null, lastModified: null });
  });
});

describe('the document', () => {
  const URL_ = 'https://app.example/client.json';
  const R = 'http://127.0.0.1:9/callback';
  const doc = (extra: Record<string, unknown> = {}) => JSON.parse(cimdDocument(URL_, R, extra));
  it('keeps the name (cleaned), the redirect URIs and the auth method none', () => {
    const d = validateDocument(URL_, doc({ client_name: 'Claude\u202E (verified)\u200F', scope: 'openid profile', logo_uri: 'https://app.example/l.png', unknown_member: 1 }));
    expect(d.name).toBe('Claude (verified)');
    expect(d.redirectUris).toEqual([R]);
    expect(d.metadata).toMatchObject({ client_id: URL_, token_endpoint_auth_method: 'none', response_types: ['code'] });
    expect(validateDocument(URL_, doc({ token_endpoint_auth_method: undefined, grant_types: undefined, response_types: undefined, client_name: undefined })).name).toBe('unnamed client');
  });
  it('refuses what the draft and the registration rules forbid, naming the member', () => {
    const cases: Array<[unknown, RegExp]> = [
      [[], /not a JSON object/],
      ['x', /not a JSON object/],
      [doc({ client_id: 'https://other.example/client.json' }), /^client_id: .*must equal the URL/],
      [doc({ client_id: URL_ + '/' }), /^client_id:/],
      [doc({ client_id: undefined }), /^client_id:/],
      [doc({ client_secret: 's' }), /^client_secret:/],
      [doc({ client_secret_expires_at: 0 }), /^client_secret:/],
      [doc({ token_endpoint_auth_method: 'client_secret_basic' }), /^token_endpoint_auth_method:/],
      [doc({ token_endpoint_auth_method: 'private_key_jwt', jwks_uri: 'https://app.example/jwks' }), /private_key_jwt is not implemented/],
      [doc({ jwks: { keys: [{ kty: 'EC', crv: 'P-256', x: 'a', y: 'b', d: 'secret' }] } }), /^jwks: contains private key material/],
      [doc({ jwks: { keys: [{ kty: 'oct', k: 'c2VjcmV0' }] } }), /^jwks: contains private key material/],
      [doc({ redirect_uris: [] }), /^redirect_uris: must be a non-empty list/],
      [doc({ redirect_uris: 'http://127.0.0.1:9/callback' }), /^redirect_uris:/],
      [doc({ redirect_uris: ['javascript:alert(1)'] }), /^redirect_uris: "javascript:alert\(1\)" scheme javascript/],
      [doc({ redirect_uris: ['http://evil.example/cb'] }), /loopback/],
      [doc({ redirect_uris: [R, 'https://app.example/cb#frag'] }), /fragment/],
      [doc({ redirect_uris: [R, 42] }), /must be a string/],
      [doc({ redirect_uris: Array.from({ length: 21 }, (_, i) => `https://app.example/cb${i}`) }), /at most 20/],
      [doc({ grant_types: ['client_credentials'] }), /^grant_types:/],
      [doc({ grant_types: ['refresh_token'] }), /^grant_types: must include authorization_code/],
      [doc({ response_types: ['token'] }), /^response_types:/],
      [doc({ client_name: { text: 'x' } }), /^client_name:/],
    ];
    for (const [j, why] of cases) {
      let message = '';
      try {
        validateDocument(URL_, j);
      } catch (e) {
        expect(e).toBeInstanceOf(CimdFailure);
        message = (e as Error).message;
      }
      expect(message, JSON.stringify(j).slice(0, 120)).toMatch(why);
    }
  });
});

describe('the fetch', () => {
  let host: CimdHost;
  beforeAll(async () => {
    host = await startCimdHost();
  }, 60_000);
  afterAll(async () => {
    await host?.close();
  });

  it('resolves the host once and connects to the address it checked (no second resolution: no DNS rebinding)', async () => {
    // A name no DNS server knows: the fetch can only reach the host through the answer checked here.
    const url = `https://${CIMD_TEST_NAME}:${host.port}/rebind.json`;
    host.set('/rebind.json', { body: cimdDocument(url, 'http://127.0.0.1:9/cb'), headers: { 'cache-control': 'max-age=60' } });
    // A resolver that answers loopback once, then (as a rebinding DNS server would) something else.
    const answers = [['127.0.0.1'], ['10.9.9.9']];
    const asked: string[] = [];
    const fetcher = new CimdFetcher({ allowLoopback: true, extraCa: readFileSync(host.caCertPath, 'utf8'), resolve: async (h) => (asked.push(h), answers.shift() ?? []) });
    const got = await fetcher.fetch(url);
    expect(got.status).toBe(200);
    expect((got as { json: { client_id: string } }).json.client_id).toBe(url);
    expect(asked).toEqual([CIMD_TEST_NAME]);
    // The certificate was checked against the URL's host name, which the request also names.
    expect(host.requests('/rebind.json').at(-1)!.host).toBe(`${CIMD_TEST_NAME}:${host.port}`);
    // A certificate that does not name the host is refused.
    const other = `https://other.cimd.test:${host.port}/rebind.json`;
    host.set('/rebind.json', { body: cimdDocument(other, 'http://127.0.0.1:9/cb') });
    const wrongName = new CimdFetcher({ allowLoopback: true, extraCa: readFileSync(host.caCertPath, 'utf8'), resolve: async () => ['127.0.0.1'] });
    await expect(wrongName.fetch(other)).rejects.toThrow(/could not be fetched \(TLS: .*other\.cimd\.test/);
  });

  it('refuses a host that resolves to any private address, before connecting', async () => {
    const before = host.connections();
    const mixed = new CimdFetcher({ allowLoopback: false, extraCa: readFileSync(host.caCertPath, 'utf8'), resolve: async () => ['203.0.113.9', '127.0.0.1'] });
    await expect(mixed.fetch(`https://cimd.example:${host.port}/x.json`)).rejects.toThrow(/resolves to 127\.0\.0\.1, which is a private, loopback/);
    const linkLocal = new CimdFetcher({ allowLoopback: true, resolve: async () => ['169.254.169.254'] });
    await expect(linkLocal.fetch(`https://metadata.example:${host.port}/x.json`)).rejects.toThrow(/resolves to 169\.254\.169\.254/);
    const mapped = new CimdFetcher({ allowLoopback: false, resolve: async () => ['::ffff:127.0.0.1'] });
    await expect(mapped.fetch(`https://mapped.example:${host.port}/x.json`)).rejects.toThrow(/special-use/);
    const literal = new CimdFetcher({ allowLoopback: false });
    await expect(literal.fetch(`https://127.0.0.1:${host.port}/x.json`)).rejects.toThrow(/the host 127\.0\.0\.1 is a private, loopback/);
    expect(host.connections()).toBe(before);
  });

  it('verifies TLS: without the CA the fetch fails', async () => {
    const url = `https://127.0.0.1:${host.port}/tls.json`;
    host.set('/tls.json', { body: cimdDocument(url, 'http://127.0.0.1:9/cb') });
    await expect(new CimdFetcher({ allowLoopback: true }).fetch(url)).rejects.toThrow(/could not be fetched \(TLS: /);
  });

  it('sends the validators it kept and reads a 304', async () => {
    const url = `https://127.0.0.1:${host.port}/etag.json`;
    host.set('/etag.json', (req, res) => {
      if (req.headers['if-none-match'] === '"v1"') return void res.writeHead(304, { etag: '"v1"', 'cache-control': 'max-age=120' }).end();
      res.writeHead(200, { 'content-type': 'application/json', etag: '"v1"' }).end(cimdDocument(url, 'http://127.0.0.1:9/cb'));
    });
    const fetcher = new CimdFetcher({ allowLoopback: true, extraCa: readFileSync(host.caCertPath, 'utf8') });
    expect((await fetcher.fetch(url)).status).toBe(200);
    const again = await fetcher.fetch(url, { etag: '"v1"', lastModified: null });
    expect(again.status).toBe(304);
    expect(host.requests('/etag.json').map((h) => h['if-none-match'])).toEqual([undefined, '"v1"']);
  });
});

describe('resolution and limits (issue #42 item 4)', () => {
  it('a silent name server: the deadline cancels the lookup, which ends at once; nothing waits on a thread', async () => {
    const silent = createSocket('udp4');
    let queries = 0;
    silent.on('message', () => queries++);
    await new Promise<void>((r) => silent.bind(0, '127.0.0.1', r));
    try {
      const resolve = boundedResolver([`127.0.0.1:${silent.address().port}`]);
      let ended = 0;
      const fetcher = new CimdFetcher({ allowLoopback: false, timeoutMs: 300, resolve: (h, run) => resolve(h, run).finally(() => ended++) });
      const t0 = Date.now();
      const works: Array<Promise<void>> = [];
      const endedAll = Promise.all(Array.from({ length: CIMD_MAX_CONCURRENT }, (_, i) => new Promise<void>((r) => works.push(fetcher.fetch(`https://h${i}.silent.test/c.json`, undefined, r).then(() => undefined, () => undefined)))));
      await Promise.all(works);
      await endedAll;
      expect(Date.now() - t0).toBeLessThan(3000);
      expect(ended).toBe(CIMD_MAX_CONCURRENT);
      expect(queries).toBeGreaterThan(0);
      // Without the deadline, c-ares gives up by itself (timeout and tries bounded): a failure naming the code.
      await expect(resolve('again.silent.test', {})).rejects.toMatchObject({ code: expect.stringMatching(/ETIMEOUT|ECONNREFUSED/) });
    } finally {
      silent.close();
    }
  }, 20_000);

  it('localhost is loopback without a query (RFC 6761): refused unless loopback is allowed', async () => {
    const resolve = boundedResolver(['127.0.0.1:9']);
    expect(await resolve('localhost', {})).toEqual(['127.0.0.1', '::1']);
    expect(await resolve('a.b.LOCALHOST', {})).toEqual(['127.0.0.1', '::1']);
    await expect(new CimdFetcher({ allowLoopback: false }).fetch('https://localhost:9/c.json')).rejects.toThrow(/resolves to 127\.0\.0\.1, which is a private, loopback/);
  });

  it('a slot is held until the lookup really ends, past the deadline', async () => {
    const hanging: Array<() => void> = [];
    const fetcher = new CimdFetcher({ allowLoopback: false, timeoutMs: 50, resolve: () => new Promise((_, reject) => hanging.push(() => reject(Object.assign(new Error('x'), { code: 'ECANCELLED' })))) });
    for (let i = 0; i < CIMD_MAX_CONCURRENT; i++) await expect(fetcher.fetch(`https://h${i}.example/c.json`)).rejects.toThrow(/no complete answer within 0.05 s/);
    // Every deadline has passed, but the lookups have not ended: no slot is free.
    await expect(fetcher.fetch('https://next.example/c.json')).rejects.toMatchObject({ error: 'temporarily_unavailable', message: expect.stringMatching(/too many client metadata documents are being fetched at once/) });
    hanging.shift()!();
    await new Promise((r) => setImmediate(r));
    await expect(fetcher.fetch('https://next.example/c.json')).rejects.toThrow(/no complete answer/); // a slot again (and a lookup that hangs again)
  });

  it('per client address: one fetch at a time and a bucket per minute; IPv6 counted by its /64', () => {
    let now = 0;
    const limit = new CimdAddressLimit(3, () => now);
    const give = limit.take('203.0.113.5');
    expect(() => limit.take('203.0.113.5')).toThrow(/already being fetched for a request from this address/);
    expect(() => limit.take('::ffff:203.0.113.5')).toThrow(/already being fetched/);
    limit.take('203.0.113.6')(); // another address is not affected
    give();
    give(); // giving back twice gives back once
    limit.take('203.0.113.5')();
    limit.take('203.0.113.5')();
    let refusal: CimdFailure | undefined;
    try {
      limit.take('203.0.113.5');
    } catch (e) {
      refusal = e as CimdFailure;
    }
    expect(refusal?.message).toMatch(/at most 3 a minute/);
    expect(refusal?.retryAfterSeconds).toBe(20);
    now += 20_000; // one refilled
    limit.take('203.0.113.5')();
    limit.take('2001:db8:1:2::1')();
    limit.take('2001:db8:1:2::2')();
    limit.take('2001:db8:1:2:ffff::3')();
    expect(() => limit.take('2001:db8:1:2::4')).toThrow(/at most 3 a minute/);
    limit.take('2001:db8:1:3::1')();
  });
});
