/**
 * OAuth Client ID Metadata Documents (issue #32 item 1) through the real `atelier serve`: the
 * official MCP client v2 identifies itself by the HTTPS URL of its metadata document (served over
 * HTTPS on loopback with a throwaway CA, which the service trusts through --oauth-cimd-ca-file and
 * may fetch from through --oauth-cimd-allow-loopback), the owner approves on the consent page, the
 * client gets a token and calls a tool; the dashboard lists and revokes it. A service started
 * without the test setting refuses a loopback document URL and nothing reaches the document's host.
 * Hostile documents and the HTTP caching rules are tried one by one.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type Server } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client';
import { MemoryOAuthProvider } from '../fixtures/oauth-provider.js';
import { chromium } from 'playwright-core';
import { call, dashboardLogin, httpRequest, serveExpectingFailure, startService, type Service } from './harness.js';
import { ALL_TOOLS } from './spec.js';
import { cimdDocument, startCimdHost, type CimdHost } from '../fixtures/cimd-host.js';

let svc: Service;
let host: CimdHost;
let session: { cookie: string; csrf: string };
const REDIRECT = 'http://127.0.0.1:9/callback';
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };
const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const INIT = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });
const BIDI = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C\uFEFF]/;

beforeAll(async () => {
  host = await startCimdHost();
  // This file fetches far more documents a minute from one address than a client would (the per-address limit is tried in reverse-proxy.test.ts).
  svc = await startService({ args: ['--unsafe-dev-no-sandbox', '--oauth-cimd-allow-loopback', '--oauth-cimd-ca-file', host.caCertPath, '--oauth-cimd-fetches-per-minute', '100000'] });
  session = await dashboardLogin(svc);
}, 90_000);
afterAll(async () => {
  await svc?.dispose();
  await host?.close();
});


const pkce = () => {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
};

function authorizePath(clientId: string, p: Record<string, string> = {}): string {
  return `/oauth/authorize?${new URLSearchParams({ response_type: 'code', client_id: clientId, redirect_uri: REDIRECT, state: 's1', code_challenge: pkce().challenge, code_challenge_method: 'S256', resource: svc.mcpUrl, ...p })}`;
}

/** The consent page an authorization request leads the logged-in owner to. */
async function consentPage(path: string): Promise<{ body: string; request: string; csrf: string }> {
  const a = await httpRequest(svc.url, 'GET', path);
  expect(a.status, a.body).toBe(303);
  const page = await httpRequest(svc.url, 'GET', String(a.headers.location), { cookie: session.cookie });
  expect(page.status).toBe(200);
  return { body: page.body, request: /name="request" value="([^"]+)"/.exec(page.body)![1]!, csrf: /name="csrf" value="([^"]+)"/.exec(page.body)![1]! };
}

/** An authorization request the service refuses with a page (no redirect): the page's text. */
async function refused(path: string, svcOf: Service = svc): Promise<string> {
  const a = await httpRequest(svcOf.url, 'GET', path);
  expect(a.status, a.body).toBeGreaterThanOrEqual(400);
  expect(a.headers.location).toBeUndefined();
  expect(a.body).toContain('Authorization request refused');
  expect(String(a.headers['content-security-policy'])).toContain("default-src 'none'");
  return a.body.replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, '&').replace(/&lt;/g, '<').replace(/&gt;/g, '>');
}

const docUrl = (path: string) => `${host.origin}${path}`;
function serve(path: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = { 'cache-control': 'max-age=300' }): string {
  const url = docUrl(path);
  host.set(path, { body: cimdDocument(url, REDIRECT, extra), headers });
  return url;
}

describe('a client identified by its metadata document', () => {
  it('the official v2 client: document → consent (host verified, name self-declared) → token → tool call; listed and revoked on the dashboard', async () => {
    const as = JSON.parse((await httpRequest(svc.url, 'GET', '/.well-known/oauth-authorization-server')).body);
    expect(as.client_id_metadata_document_supported).toBe(true);
    expect(as.registration_endpoint).toBe(`${svc.url}/oauth/register`); // older clients still register

    const url = serve('/clients/e2e.json', { client_name: 'CIMD e2e client' });
    const provider = new MemoryOAuthProvider({ redirectUrl: REDIRECT, clientName: 'not sent: the document says who the client is', clientMetadataUrl: url });
    const first = new Client({ name: 'cimd-e2e', version: '1.0.0' });
    const t1 = new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { authProvider: provider });
    await expect(first.connect(t1)).rejects.toThrow(UnauthorizedError);
    // The client did not register: its client_id is its document's URL.
    expect(provider.info.client_id).toBe(url);
    expect(provider.info.client_id_issued_at).toBeUndefined();
    expect(provider.authUrl!.searchParams.get('client_id')).toBe(url);

    const { body, request, csrf } = await consentPage(provider.authUrl!.pathname + provider.authUrl!.search);
    expect(body).toContain(`A client from <strong class="host">127.0.0.1:${host.port}</strong> asks for access to <code>${svc.mcpUrl}</code>. It calls itself <bdi><strong>CIMD e2e client</strong></bdi>.`);
    expect(body).toContain(`Verified: its metadata document was fetched over HTTPS from <code>127.0.0.1:${host.port}</code>, at <code>${url}</code>`);
    expect(body).toContain('Not verified: the name, which the document declares itself.');
    expect(host.requests('/clients/e2e.json').length).toBe(1);
    const ticked = Object.fromEntries([...body.matchAll(/name="(ts_[a-z-]+)" value="on" checked/g)].map((m) => [m[1]!, 'on']));
    const post = await httpRequest(svc.url, 'POST', '/oauth/consent', { cookie: session.cookie, ...FORM }, new URLSearchParams({ request, csrf, decision: 'approve', ...ticked }).toString());
    expect(post.status).toBe(303);
    const cb = new URL(String(post.headers.location));
    expect(cb.origin + cb.pathname).toBe(REDIRECT);
    await t1.finishAuth(cb.searchParams.get('code')!, cb.searchParams.get('iss') ?? undefined);
    expect(provider.saved.access_token).toMatch(/^atla_/);

    const c = new Client({ name: 'cimd-e2e', version: '1.0.0' });
    await c.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { authProvider: provider }));
    expect((await c.listTools()).tools.length).toBe(ALL_TOOLS);
    expect((await call(c, 'workspace_list', {})).ok).toBe(true);
    await c.close();
    // Kept under max-age=300: the authorization request fetched it once; the token endpoint never does.
    expect(host.requests('/clients/e2e.json').length).toBe(1);

    // The dashboard lists it with its URL and host.
    const list = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/oauth/clients', { cookie: session.cookie })).body).clients as Array<Record<string, any>>;
    const mine = list.find((x) => x.metadataUrl === url)!;
    expect(mine).toMatchObject({ name: 'CIMD e2e client', host: `127.0.0.1:${host.port}`, redirectUris: [REDIRECT] });
    expect(mine.id).toMatch(/^oauthc_/);
    expect(mine.grants.length).toBe(1);

    // The refresh token works with the URL as client_id; a secret is refused (the client has none).
    const r1 = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, new URLSearchParams({ grant_type: 'refresh_token', refresh_token: provider.saved.refresh_token, client_id: url }).toString());
    expect(r1.status, r1.body).toBe(200);
    const t2 = JSON.parse(r1.body);
    const withSecret = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, new URLSearchParams({ grant_type: 'refresh_token', refresh_token: t2.refresh_token, client_id: url, client_secret: 'guess' }).toString());
    expect(withSecret.status).toBe(401);
    // The owner's consent is the only way in: another URL, or a forged code, gets nothing.
    const stranger = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, new URLSearchParams({ grant_type: 'authorization_code', code: 'forged', code_verifier: pkce().verifier, redirect_uri: REDIRECT, client_id: docUrl('/clients/never-seen.json') }).toString());
    expect(stranger.status).toBe(401);
    expect(JSON.parse(stranger.body).error).toBe('invalid_client');
    const forged = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, new URLSearchParams({ grant_type: 'authorization_code', code: 'forged', code_verifier: pkce().verifier, redirect_uri: REDIRECT, client_id: url }).toString());
    expect(JSON.parse(forged.body).error).toBe('invalid_grant');

    // The dashboard's MCP access page (chromium) shows it with its host and URL; the owner disconnects
    // it there, and its tokens stop at once.
    const browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    try {
      const ctx = await browser.newContext();
      const [name, value] = session.cookie.split('=') as [string, string];
      await ctx.addCookies([{ name, value, url: svc.url }]);
      const page = await ctx.newPage();
      page.on('dialog', (d) => void d.accept());
      await page.goto(`${svc.url}/#/mcp`);
      const row = page.locator(`li[data-oauth-client="${mine.id}"]`);
      await row.waitFor();
      expect(await row.locator('[data-testid=oauth-client-url]').textContent()).toBe(`from 127.0.0.1:${host.port} (verified): ${url}`);
      expect(await row.locator('bdi').textContent()).toBe('CIMD e2e client');
      await row.locator(`[data-testid="disconnect-${mine.id}"]`).click();
      await row.waitFor({ state: 'detached' });
    } finally {
      await browser.close();
    }
    const revokedList = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/oauth/clients', { cookie: session.cookie })).body).clients as Array<{ id: string }>;
    expect(revokedList.some((x) => x.id === mine.id)).toBe(false);
    expect((await httpRequest(svc.url, 'POST', '/mcp', { ...MCP_HEADERS, authorization: `Bearer ${t2.access_token}` }, INIT)).status).toBe(401);
    const afterRevoke = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, new URLSearchParams({ grant_type: 'refresh_token', refresh_token: t2.refresh_token, client_id: url }).toString());
    expect(afterRevoke.status).toBe(401);
    // The same URL may ask again, as a new client the owner must approve again (the document is fetched anew).
    const again = await consentPage(authorizePath(url));
    expect(again.body).toContain('It calls itself <bdi><strong>CIMD e2e client</strong></bdi>.');
    expect(host.requests('/clients/e2e.json').length).toBe(2);
    const relisted = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/oauth/clients', { cookie: session.cookie })).body).clients as Array<Record<string, any>>;
    const fresh = relisted.filter((x) => x.metadataUrl === url);
    expect(fresh.length).toBe(1);
    expect(fresh[0]!.id).not.toBe(mine.id);
    expect(fresh[0]!.grants).toEqual([]);
  }, 120_000);

  it('dynamic registration still works beside it (older clients)', async () => {
    const r = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: 'older client', redirect_uris: [REDIRECT] }));
    expect(r.status).toBe(201);
    const id = JSON.parse(r.body).client_id as string;
    expect(id).toMatch(/^oauthc_/);
    const page = await consentPage(authorizePath(id));
    expect(page.body).toContain('<bdi><strong>older client</strong></bdi> (its name is chosen by the client itself and not verified;');
  });
});

describe('production mode: no fetch from private addresses', () => {
  it('a service without --oauth-cimd-allow-loopback refuses loopback and private document URLs with a page, and nothing reaches the host', async () => {
    const prod = await startService({ args: ['--unsafe-dev-no-sandbox', '--oauth-cimd-ca-file', host.caCertPath] });
    try {
      const url = serve('/clients/prod.json');
      const before = host.connections();
      for (const u of [url, `https://localhost:${host.port}/clients/prod.json`, `https://[::1]:${host.port}/clients/prod.json`, `https://[::ffff:7f00:1]:${host.port}/clients/prod.json`, 'https://169.254.169.254/latest/meta-data.json', 'https://10.0.0.1/client.json']) {
        const text = await refused(authorizePath(u), prod);
        expect(text, u).toContain('<code>invalid_client</code>');
        expect(text, u).toMatch(/a private, loopback, link-local or otherwise special-use address; client metadata documents are fetched from public addresses only/);
        expect(text, u).not.toContain('--oauth-cimd-allow-loopback');
      }
      expect(host.connections()).toBe(before);
      expect(host.requests('/clients/prod.json')).toEqual([]);
    } finally {
      await prod.dispose();
    }
  }, 90_000);

  it('the loopback setting is refused together with a non-loopback host or a public origin', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'atelier-cimd-cfg-'));
    const wide = await serveExpectingFailure(['--data-dir', dataDir, '--oauth-cimd-allow-loopback', '--host', '0.0.0.0', '--public-origin', 'https://atelier.example.com', '--port', '0']);
    expect(wide.code).not.toBe(0);
    expect(wide.stderr).toMatch(/--oauth-cimd-allow-loopback \/ ATELIER_OAUTH_CIMD_ALLOW_LOOPBACK: for development and tests only/);
    const proxied = await serveExpectingFailure(['--data-dir', dataDir, '--oauth-cimd-allow-loopback', '--public-origin', 'https://atelier.example.com', '--port', '0']);
    expect(proxied.code).not.toBe(0);
    expect(proxied.stderr).toMatch(/--oauth-cimd-allow-loopback/);
    const noCa = await serveExpectingFailure(['--data-dir', dataDir, '--oauth-cimd-ca-file', '/nonexistent/ca.pem', '--port', '0', '--unsafe-dev-no-sandbox']);
    expect(noCa.code).not.toBe(0);
    expect(noCa.stderr).toMatch(/--oauth-cimd-ca-file \/ ATELIER_OAUTH_CIMD_CA_FILE: \/nonexistent\/ca\.pem cannot be read \(ENOENT\)/);
    rmSync(dataDir, { recursive: true, force: true });
  }, 60_000);
});

describe('hostile documents', () => {
  it('each is refused with a page naming the rule, and nothing is kept', async () => {
    const cases: Array<{ path: string; route?: Parameters<CimdHost['set']>[1]; why: RegExp; redirect?: string }> = [
      { path: '/h/wrong-id.json', route: { body: cimdDocument(docUrl('/h/other.json'), REDIRECT) }, why: /client_id: the document's client_id \(".*\/h\/other\.json"\) must equal the URL it was fetched from, exactly/ },
      { path: '/h/large.json', route: { body: cimdDocument(docUrl('/h/large.json'), REDIRECT, { padding: 'x'.repeat(20_000) }) }, why: /larger than 16 KiB/ },
      {
        path: '/h/large-chunked.json',
        route: (_req, res) => {
          res.writeHead(200, { 'content-type': 'application/json' });
          for (let i = 0; i < 40; i++) res.write('x'.repeat(1024));
          res.end();
        },
        why: /larger than 16 KiB/,
      },
      { path: '/h/javascript.json', route: { body: cimdDocument(docUrl('/h/javascript.json'), REDIRECT, { redirect_uris: [REDIRECT, 'javascript:alert(1)'] }) }, why: /redirect_uris: "javascript:alert\(1\)" scheme javascript: must be https/ },
      { path: '/h/html.json', route: { body: '<html>hi</html>', headers: { 'content-type': 'text/html' } }, why: /served as "text\/html", not application\/json/ },
      { path: '/h/not-json.json', route: { body: '{"client_id": ' }, why: /not valid JSON/ },
      { path: '/h/array.json', route: { body: '[]' }, why: /not a JSON object/ },
      { path: '/h/missing.json', why: /answered HTTP 404, not 200/ },
      { path: '/h/secret.json', route: { body: cimdDocument(docUrl('/h/secret.json'), REDIRECT, { client_secret: 'shh' }) }, why: /client_secret: a metadata document must not carry a shared secret/ },
      { path: '/h/basic.json', route: { body: cimdDocument(docUrl('/h/basic.json'), REDIRECT, { token_endpoint_auth_method: 'client_secret_basic' }) }, why: /token_endpoint_auth_method: "client_secret_basic" is not accepted/ },
      { path: '/h/private-key.json', route: { body: cimdDocument(docUrl('/h/private-key.json'), REDIRECT, { jwks: { keys: [{ kty: 'EC', crv: 'P-256', x: 'x', y: 'y', d: 'd' }] } }) }, why: /jwks: contains private key material/ },
      { path: '/h/gzip.json', route: { body: 'xx', headers: { 'content-encoding': 'gzip' } }, why: /gzip"-encoded; only an uncompressed document is read/ },
      // The redirect URI of the request must be one the document lists, exactly.
      { path: '/h/inexact.json', route: { body: cimdDocument(docUrl('/h/inexact.json'), REDIRECT) }, redirect: REDIRECT + '/', why: /redirect_uri is missing or does not exactly match a redirect URI listed in the client's metadata document/ },
      { path: '/h/inexact2.json', route: { body: cimdDocument(docUrl('/h/inexact2.json'), REDIRECT) }, redirect: 'http://127.0.0.1:9/Callback', why: /does not exactly match/ },
    ];
    for (const c of cases) {
      if (c.route) host.set(c.path, c.route);
      const text = await refused(authorizePath(docUrl(c.path), c.redirect ? { redirect_uri: c.redirect } : {}));
      expect(text, c.path).toMatch(c.why);
    }
    // Invalid documents are never kept: none of these became a client.
    const list = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/oauth/clients', { cookie: session.cookie })).body).clients as Array<{ metadataUrl: string | null }>;
    const kept = list.map((x) => x.metadataUrl).filter((u) => u?.includes('/h/'));
    expect(kept.sort()).toEqual([docUrl('/h/inexact.json'), docUrl('/h/inexact2.json')]); // valid documents, only the request was wrong
  }, 120_000);

  it('a redirect is not followed, even to this same host; nothing reaches the target', async () => {
    // A target that counts connections: the service must never connect to it.
    let targetConnections = 0;
    const target: Server = createServer((s) => {
      targetConnections++;
      s.destroy();
    });
    await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
    const tport = (target.address() as AddressInfo).port;
    try {
      host.set('/h/redirect.json', { status: 302, headers: { location: `https://127.0.0.1:${tport}/client.json` } });
      host.set('/h/redirect-metadata.json', { status: 301, headers: { location: 'http://169.254.169.254/latest/meta-data/' } });
      host.set('/h/redirect-same.json', { status: 307, headers: { location: docUrl('/clients/e2e.json') } });
      for (const p of ['/h/redirect.json', '/h/redirect-metadata.json', '/h/redirect-same.json'])
        expect(await refused(authorizePath(docUrl(p))), p).toMatch(/answered HTTP 30[127], a redirect; redirects are not followed/);
      expect(targetConnections).toBe(0);
    } finally {
      await new Promise<void>((r) => target.close(() => r()));
    }
  });

  it('a document that never finishes is given up after 5 s', async () => {
    const held: Array<{ end(): void }> = [];
    host.set('/h/slow.json', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"client_id": ');
      held.push(res); // never finished by the host
    });
    const text = await refused(authorizePath(docUrl('/h/slow.json')));
    expect(text).toMatch(/no complete answer within 5 s/);
    for (const r of held) r.end();
  }, 60_000);

  it('URLs that are not Client ID Metadata Document URLs are refused before any fetch', async () => {
    const before = host.connections();
    const cases: Array<[string, RegExp]> = [
      [`${host.origin}/`, /must have a path/],
      [`${host.origin}/a/../clients/e2e.json`, /must not contain "\." or "\.\." path segments/],
      [`https://user@127.0.0.1:${host.port}/clients/e2e.json`, /must not contain a user name or password/],
      [`${host.origin}/clients/e2e.json#frag`, /must not contain a fragment/],
      [`https://127.0.0.1:443/clients/e2e.json`, /must be written in its normal form "https:\/\/127\.0\.0\.1\/clients\/e2e\.json"/],
    ];
    for (const [u, why] of cases) expect(await refused(authorizePath(u)), u).toMatch(why);
    expect(host.connections()).toBe(before);
    // Not https: not a metadata document URL at all, an unknown client.
    expect(await refused(authorizePath(`http://127.0.0.1:${host.port}/clients/e2e.json`))).toContain('unknown or revoked client_id');
  });

  it('a name with bidirectional controls is shown cleaned, isolated, and marked self-declared', async () => {
    const url = serve('/h/bidi.json', { client_name: 'Claude\u202E\u200F (verified)\u2066\n\tby Atelier\uFEFF<script>' });
    const { body } = await consentPage(authorizePath(url));
    expect(body).toContain('It calls itself <bdi><strong>Claude (verified) by Atelier&lt;script&gt;</strong></bdi>.');
    expect(body).not.toMatch(BIDI);
    expect(body).not.toContain('<script>');
    const list = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/oauth/clients', { cookie: session.cookie })).body).clients as Array<{ name: string; metadataUrl: string }>;
    expect(list.find((x) => x.metadataUrl === url)!.name).toBe('Claude (verified) by Atelier<script>');
  });
});

describe('the HTTP caching rules', () => {
  const nameOn = async (url: string) => /It calls itself <bdi><strong>([^<]*)<\/strong><\/bdi>/.exec((await consentPage(authorizePath(url))).body)![1];

  it('max-age: a changed document is not fetched again while the kept one is fresh', async () => {
    const url = serve('/c/max-age.json', { client_name: 'first' }, { 'cache-control': 'max-age=3600' });
    expect(await nameOn(url)).toBe('first');
    serve('/c/max-age.json', { client_name: 'second' }, { 'cache-control': 'max-age=3600' });
    expect(await nameOn(url)).toBe('first');
    expect(host.requests('/c/max-age.json').length).toBe(1);
  });

  it('no-cache with an ETag: revalidated at every request (304 keeps it), a change is seen at once; an error is never served from the cache', async () => {
    const url = docUrl('/c/etag.json');
    let version = 1;
    let status = 200;
    host.set('/c/etag.json', (req, res) => {
      if (status !== 200) return void res.writeHead(status, { 'content-type': 'application/json' }).end('{}');
      const etag = `"v${version}"`;
      // A 304 need not repeat Cache-Control: the kept answer's no-cache still rules (RFC 9111 section 4.3.4).
      if (req.headers['if-none-match'] === etag) return void res.writeHead(304, { etag }).end();
      res.writeHead(200, { 'content-type': 'application/json', etag, 'cache-control': 'no-cache' }).end(cimdDocument(url, REDIRECT, { client_name: `version ${version}` }));
    });
    expect(await nameOn(url)).toBe('version 1');
    expect(await nameOn(url)).toBe('version 1');
    version = 2;
    expect(await nameOn(url)).toBe('version 2');
    expect(host.requests('/c/etag.json').map((h) => h['if-none-match'] ?? null)).toEqual([null, '"v1"', '"v1"']);
    // The document's host fails: the authorization is refused, not served from the kept copy.
    status = 500;
    expect(await refused(authorizePath(url))).toMatch(/answered HTTP 500, not 200/);
    status = 200;
    expect(await nameOn(url)).toBe('version 2');
    expect(host.requests('/c/etag.json').at(-1)!['if-none-match']).toBe('"v2"');
  });

  it('no-store: fetched at every request, without validators; an invalid new version is refused and not kept', async () => {
    const url = serve('/c/no-store.json', { client_name: 'kept nowhere' }, { 'cache-control': 'no-store', etag: '"x"' });
    expect(await nameOn(url)).toBe('kept nowhere');
    expect(await nameOn(url)).toBe('kept nowhere');
    host.set('/c/no-store.json', { body: cimdDocument(url, REDIRECT, { redirect_uris: ['javascript:alert(1)'] }), headers: { 'cache-control': 'no-store' } });
    expect(await refused(authorizePath(url))).toMatch(/redirect_uris: "javascript:alert\(1\)"/);
    serve('/c/no-store.json', { client_name: 'fixed' }, { 'cache-control': 'no-store' });
    expect(await nameOn(url)).toBe('fixed');
    const seen = host.requests('/c/no-store.json');
    expect(seen.length).toBe(4);
    expect(seen.every((h) => h['if-none-match'] === undefined)).toBe(true);
  });
});
