/**
 * OAuth 2.1 for remote MCP clients (issue #16): the official MCP client's OAuth flow end to end
 * against the real `atelier serve` (its OAuthClientProvider; consent approved by a test holding a
 * dashboard session), and the refusals: wrong redirect, missing PKCE or plain method, reused
 * code, expired and revoked tokens, a token for another resource, refresh rotation.
 */
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client';
import { MemoryOAuthProvider } from '../fixtures/oauth-provider.js';
import { call, connectV2, dashboardLogin, httpRequest, startService, type Service } from './harness.js';
import { ALL_TOOLS } from './spec.js';

let svc: Service;
let session: { cookie: string; csrf: string };
const REDIRECT = 'http://127.0.0.1:9/callback';

beforeAll(async () => {
  svc = await startService({ args: ['--unsafe-dev-no-sandbox', '--oauth-access-token-seconds', '5'] });
  session = await dashboardLogin(svc);
}, 60_000);
afterAll(async () => {
  await svc?.dispose();
});


/** Plays the owner's browser: follows the authorization URL, approves on the consent page, returns the callback URL. */
/** `choices`: the consent form's checkbox fields to send (default: everything the page ticked). */
async function approve(authUrl: URL, decision: 'approve' | 'deny' = 'approve', clientName = 'raw client', choices?: Record<string, string>): Promise<URL> {
  const a = await httpRequest(svc.url, 'GET', authUrl.pathname + authUrl.search);
  expect(a.status).toBe(303);
  const consentPath = String(a.headers.location);
  // Without the session cookie: a page asking to log in, never an approval form.
  const anon = await httpRequest(svc.url, 'GET', consentPath);
  expect(anon.body).toContain('Owner login needed');
  expect(anon.body).not.toContain('name="csrf"');
  const page = await httpRequest(svc.url, 'GET', consentPath, { cookie: session.cookie });
  expect(page.status).toBe(200);
  const csp = String(page.headers['content-security-policy']);
  expect(csp).toContain("default-src 'none'");
  expect(csp).not.toContain('unsafe-inline');
  expect(page.body).not.toMatch(/<script|style=|<style/i);
  expect(page.body).toContain(`<strong>${clientName}</strong>`);
  const request = /name="request" value="([^"]+)"/.exec(page.body)![1]!;
  const csrf = /name="csrf" value="([^"]+)"/.exec(page.body)![1]!;
  // A wrong CSRF token is refused and does not consume the request.
  const bad = await httpRequest(svc.url, 'POST', '/oauth/consent', { cookie: session.cookie, 'content-type': 'application/x-www-form-urlencoded' }, new URLSearchParams({ request, csrf: 'x', decision }).toString());
  expect(bad.status).toBe(403);
  const ticked = Object.fromEntries([...page.body.matchAll(/name="(ts_[a-z-]+|readonly)" value="on" checked/g)].map((m) => [m[1]!, 'on']));
  const post = await httpRequest(svc.url, 'POST', '/oauth/consent', { cookie: session.cookie, 'content-type': 'application/x-www-form-urlencoded' }, new URLSearchParams({ request, csrf, decision, ...(choices ?? ticked) }).toString());
  expect(post.status).toBe(303);
  return new URL(String(post.headers.location));
}

async function oauthConnect(provider: MemoryOAuthProvider, choices?: Record<string, string>): Promise<Client> {
  const first = new Client({ name: 'oauth-e2e', version: '1.0.0' });
  const t1 = new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { authProvider: provider });
  await expect(first.connect(t1)).rejects.toThrow(UnauthorizedError);
  expect(provider.authUrl).toBeDefined();
  const cb = await approve(provider.authUrl!, 'approve', 'e2e OAuth client', choices);
  expect(cb.searchParams.get('state')).toBe(provider.authUrl!.searchParams.get('state'));
  await t1.finishAuth(cb.searchParams.get('code')!, cb.searchParams.get('iss') ?? undefined);
  const c = new Client({ name: 'oauth-e2e', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { authProvider: provider }));
  return c;
}

const form = (o: Record<string, string>) => new URLSearchParams(o).toString();
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };
const INIT = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });
const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const pkce = () => {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
};

async function register(redirect = REDIRECT): Promise<string> {
  const r = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: 'raw client', redirect_uris: [redirect], token_endpoint_auth_method: 'none' }));
  expect(r.status).toBe(201);
  return JSON.parse(r.body).client_id;
}

function authorizePath(clientId: string, p: Record<string, string | undefined>): string {
  const q = new URLSearchParams({ response_type: 'code', client_id: clientId, redirect_uri: REDIRECT, state: 's1', resource: svc.mcpUrl });
  for (const [k, v] of Object.entries(p)) if (v === undefined) q.delete(k);
  else q.set(k, v);
  return `/oauth/authorize?${q}`;
}

/** Raw code flow up to the token response (for the refusal cases). */
async function codeFor(clientId: string, challenge: string): Promise<string> {
  const cb = await approve(new URL(svc.url + authorizePath(clientId, { code_challenge: challenge, code_challenge_method: 'S256' })));
  return cb.searchParams.get('code')!;
}

describe('OAuth discovery', () => {
  it('401 names the protected resource metadata; the metadata documents lead to the authorization server', async () => {
    const r = await httpRequest(svc.url, 'POST', '/mcp', MCP_HEADERS, INIT);
    expect(r.status).toBe(401);
    const www = String(r.headers['www-authenticate']);
    const meta = /resource_metadata="([^"]+)"/.exec(www)![1]!;
    expect(meta).toBe(`${svc.url}/.well-known/oauth-protected-resource/mcp`);
    const prm = JSON.parse((await httpRequest(svc.url, 'GET', new URL(meta).pathname)).body);
    expect(prm.resource).toBe(svc.mcpUrl);
    expect(prm.authorization_servers).toEqual([svc.url]);
    expect(prm.scopes_supported).toEqual(['mcp']);
    const as = JSON.parse((await httpRequest(svc.url, 'GET', '/.well-known/oauth-authorization-server')).body);
    expect(as.code_challenge_methods_supported).toEqual(['S256']);
    expect(as.registration_endpoint).toBe(`${svc.url}/oauth/register`);
    expect(as.revocation_endpoint).toBe(`${svc.url}/oauth/revoke`);
    // Browser-based clients (the MCP Inspector) may call the metadata cross-origin.
    const cors = await httpRequest(svc.url, 'GET', '/.well-known/oauth-authorization-server', { origin: 'https://inspector.example' });
    expect(cors.status).toBe(200);
    expect(cors.headers['access-control-allow-origin']).toBe('*');
  });
});

describe('the official MCP client through OAuth', () => {
  it('registers, gets the owner consent, calls tools, refreshes with rotation, and is revoked from the dashboard', async () => {
    const provider = new MemoryOAuthProvider({ redirectUrl: REDIRECT, clientName: 'e2e OAuth client' });
    const c = await oauthConnect(provider);
    const tools = await c.listTools();
    expect(tools.tools.length).toBe(ALL_TOOLS);
    const r = await call(c, 'workspace_list', {});
    expect(r.ok).toBe(true);
    await c.close();

    // Connected clients on the dashboard API.
    const list = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/oauth/clients', { cookie: session.cookie })).body);
    const mine = list.clients.find((x: { id: string }) => x.id === provider.info.client_id);
    expect(mine.name).toBe('e2e OAuth client');
    expect(mine.grants.length).toBe(1);

    // Refresh rotates: the new refresh token works once, the old one is refused (and ends the grant).
    const oldRefresh = provider.saved.refresh_token as string;
    const r1 = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'refresh_token', refresh_token: oldRefresh, client_id: provider.info.client_id }));
    expect(r1.status).toBe(200);
    const t1 = JSON.parse(r1.body);
    expect(t1.refresh_token).not.toBe(oldRefresh);
    const again = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'refresh_token', refresh_token: oldRefresh, client_id: provider.info.client_id }));
    expect(again.status).toBe(400);
    expect(JSON.parse(again.body).error).toBe('invalid_grant');
    // Replay detection revoked the grant: the rotated tokens stop working too.
    const after = await httpRequest(svc.url, 'POST', '/mcp', { ...MCP_HEADERS, authorization: `Bearer ${t1.access_token}` }, INIT);
    expect(after.status).toBe(401);

    // A second authorization, then the owner revokes the client on the dashboard.
    const p2 = new MemoryOAuthProvider({ redirectUrl: REDIRECT, clientName: 'e2e OAuth client' });
    const c2 = await oauthConnect(p2);
    await c2.close();
    const bad = await httpRequest(svc.url, 'DELETE', '/api/v1/oauth/clients/oauthc_unknown', { cookie: session.cookie, 'x-csrf-token': session.csrf });
    expect(bad.status).toBe(404);
    const del = await httpRequest(svc.url, 'DELETE', `/api/v1/oauth/clients/${p2.info.client_id}`, { cookie: session.cookie, 'x-csrf-token': session.csrf });
    expect(del.status).toBe(200);
    const revoked = await httpRequest(svc.url, 'POST', '/mcp', { ...MCP_HEADERS, authorization: `Bearer ${p2.saved.access_token}` }, INIT);
    expect(revoked.status).toBe(401);
    const noRefresh = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'refresh_token', refresh_token: p2.saved.refresh_token, client_id: p2.info.client_id }));
    expect(noRefresh.status).toBe(401);
    // Without the CSRF header the dashboard refuses the revocation.
    const noCsrf = await httpRequest(svc.url, 'DELETE', `/api/v1/oauth/clients/${provider.info.client_id}`, { cookie: session.cookie });
    expect(noCsrf.status).toBe(403);
  }, 60_000);

  it('the owner narrows the grant on the consent page: toolsets code, read-only; enforced on calls', async () => {
    const provider = new MemoryOAuthProvider({ redirectUrl: REDIRECT, clientName: 'e2e OAuth client' });
    const c = await oauthConnect(provider, { ts_workspace: 'on', ts_files: 'on', ts_commands: 'on', ts_git: 'on', readonly: 'on' });
    const names = (await c.listTools()).tools.map((t) => t.name);
    expect(names).toContain('files_read');
    expect(names).not.toContain('files_write');
    expect(names).not.toContain('agent_spawn');
    const w = await call(c, 'files_write', { path: 'a.txt', content: 'x' });
    expect(w.ok).toBe(false);
    if (!w.ok) expect(w.error.code).toBe('PERMISSION_DENIED');
    await c.close();
  }, 60_000);
});

describe('OAuth scopes', () => {
  it('a client asking scope "toolset:code readonly" gets at most that, and the consent page shows only that', async () => {
    const id = await register();
    const { challenge, verifier } = pkce();
    const cb = await approve(new URL(svc.url + authorizePath(id, { code_challenge: challenge, code_challenge_method: 'S256', scope: 'toolset:code readonly' })), 'approve', 'raw client', {
      ts_workspace: 'on', ts_files: 'on', ts_agents: 'on', // agents was not asked: ticking it cannot widen the grant
    });
    const code = cb.searchParams.get('code')!;
    const t = JSON.parse((await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: id, code_verifier: verifier }))).body);
    expect(t.scope.split(' ').sort()).toEqual(['readonly', 'toolset:files', 'toolset:workspace']);
    const list = await httpRequest(svc.url, 'POST', '/mcp', { ...MCP_HEADERS, authorization: `Bearer ${t.access_token}` }, JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} }));
    const names: string[] = (JSON.parse(/^data: (.*)$/m.exec(list.body)?.[1] ?? list.body).result.tools as Array<{ name: string }>).map((x) => x.name);
    expect(names).toContain('files_read');
    expect(names).not.toContain('git_status');
    expect(names).not.toContain('agent_list');
    expect(names).not.toContain('workspace_open');
  }, 60_000);
  it('a refresh with a narrower scope issues a token that is narrowed: files_write is refused with it, and the chain cannot widen back', async () => {
    const id = await register();
    const { challenge, verifier } = pkce();
    const code = await codeFor(id, challenge);
    const full = JSON.parse((await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: id, code_verifier: verifier }))).body);
    const refresh = async (refresh_token: string, scope?: string) =>
      httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'refresh_token', refresh_token, client_id: id, ...(scope === undefined ? {} : { scope }) }));
    const toolNames = async (token: string) => {
      const c = await connectV2(svc, token);
      const names = (await c.listTools()).tools.map((t) => t.name);
      const write = await call(c, 'files_write', { workspaceId: 'ws_' + 'a'.repeat(24), path: 'a.txt', content: 'x' });
      await c.close();
      return { names, write };
    };
    const before = await toolNames(full.access_token);
    expect(before.names).toContain('files_write');
    if (!before.write.ok) expect(before.write.error.code).not.toBe('PERMISSION_DENIED'); // full access: refused later, for the unknown workspace

    const r1 = await refresh(full.refresh_token, 'readonly');
    expect(r1.status).toBe(200);
    const t1 = JSON.parse(r1.body);
    expect(t1.scope).toBe('readonly');
    const narrowed = await toolNames(t1.access_token);
    expect(narrowed.names).toContain('files_read');
    expect(narrowed.names).not.toContain('files_write');
    expect(narrowed.write.ok).toBe(false);
    if (!narrowed.write.ok) {
      expect(narrowed.write.error.code).toBe('PERMISSION_DENIED');
      expect(narrowed.write.error.message).toMatch(/read-only/);
    }

    // The narrowing sticks to the chain: a refresh without scope keeps it, one asking wider is refused
    // (and does not use up the refresh token), a narrower one narrows further.
    const t2 = JSON.parse((await refresh(t1.refresh_token)).body);
    expect(t2.scope).toBe('readonly');
    expect((await toolNames(t2.access_token)).names).not.toContain('files_write');
    for (const wider of ['mcp', 'toolset:files', 'toolset:all', 'toolset:agents']) {
      const w = await refresh(t2.refresh_token, wider);
      expect(w.status, wider).toBe(400);
      expect(JSON.parse(w.body).error).toBe('invalid_scope');
      expect(JSON.parse(w.body).error_description).toMatch(/scope: a refresh may only narrow/);
    }
    const t3 = JSON.parse((await refresh(t2.refresh_token, 'toolset:files readonly')).body);
    expect(t3.scope).toBe('toolset:files readonly');
    const files = await toolNames(t3.access_token);
    expect(files.names).toContain('files_read');
    expect(files.names).not.toContain('workspace_list');
    expect(files.names).not.toContain('files_write');
    // The grant itself (what the owner approved, listed on the dashboard) is unchanged.
    const list = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/oauth/clients', { cookie: session.cookie })).body);
    expect(list.clients.find((x: { id: string }) => x.id === id).grants[0].scope).toBe('');
  }, 60_000);
});

describe('OAuth refusals', () => {
  it('refuses an unregistered or inexact redirect URI without redirecting', async () => {
    const id = await register();
    const { challenge } = pkce();
    for (const redirect of ['http://127.0.0.1:9/callback/', 'http://127.0.0.1:9/callback?x=1', 'https://evil.example/callback', 'http://127.0.0.1:9/CALLBACK']) {
      const r = await httpRequest(svc.url, 'GET', authorizePath(id, { redirect_uri: redirect, code_challenge: challenge, code_challenge_method: 'S256' }));
      expect(r.status).toBe(400);
      expect(r.headers.location).toBeUndefined();
    }
    const r = await httpRequest(svc.url, 'GET', authorizePath(id, { redirect_uri: undefined, code_challenge: challenge, code_challenge_method: 'S256' }));
    expect(r.status).toBe(400);
    // Registration refuses non-loopback http, fragments and dangerous schemes.
    for (const u of ['http://evil.example/cb', 'https://ok.example/cb#frag', 'javascript:alert(1)', 'not a uri']) {
      const reg = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ redirect_uris: [u] }));
      expect(reg.status).toBe(400);
      expect(JSON.parse(reg.body).error).toMatch(/invalid_redirect_uri|invalid_client_metadata/);
    }
    const huge = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ redirect_uris: Array(50).fill(REDIRECT) }));
    expect(huge.status).toBe(400);
  });

  it('is no open redirector: errors for a client the owner has not approved are a page here; only an approved redirect URI gets them back', async () => {
    // Registration is open: anyone may register a client whose redirect URI is a phishing page.
    const PHISH = 'https://evil.example/login';
    const r = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: 'raw client', redirect_uris: [PHISH, REDIRECT] }));
    const id = JSON.parse(r.body).client_id as string;
    const { challenge } = pkce();
    const errors: Array<Record<string, string | undefined>> = [
      { response_type: 'token' },
      { code_challenge: undefined },
      { scope: 'toolset:nonsense' },
      { resource: 'https://other.example/mcp' },
    ];
    const tryAll = async (redirect: string) => {
      const out: Array<{ status: number; location?: string; body: string; csp: string }> = [];
      for (const e of errors) {
        const a = await httpRequest(svc.url, 'GET', authorizePath(id, { code_challenge: challenge, code_challenge_method: 'S256', redirect_uri: redirect, ...e }));
        out.push({ status: a.status, location: a.headers.location as string | undefined, body: a.body, csp: String(a.headers['content-security-policy']) });
      }
      return out;
    };
    for (const a of await tryAll(PHISH)) {
      expect(a.status).toBe(400);
      expect(a.location).toBeUndefined();
      expect(a.body).toContain('Authorization request refused');
      expect(a.body).not.toContain('evil.example');
      expect(a.csp).toContain("default-src 'none'");
      expect(a.csp).toContain("form-action 'none'");
    }
    // The owner approves a request to REDIRECT: errors now go back there (RFC 6749 section 4.1.2.1),
    // never to the other registered URI, which the owner never approved.
    await codeFor(id, challenge);
    for (const a of await tryAll(REDIRECT)) {
      expect(a.status).toBe(302);
      expect(new URL(a.location!).origin + new URL(a.location!).pathname).toBe(REDIRECT);
      expect(new URL(a.location!).searchParams.get('error')).toBeTruthy();
    }
    for (const a of await tryAll(PHISH)) expect(a.location).toBeUndefined();
    // Revoked by the owner: a page again.
    await httpRequest(svc.url, 'DELETE', `/api/v1/oauth/clients/${id}`, { cookie: session.cookie, 'x-csrf-token': session.csrf });
    for (const a of await tryAll(REDIRECT)) {
      expect(a.status).toBe(400);
      expect(a.location).toBeUndefined();
    }
  }, 60_000);

  it('registration takes only https, loopback http and reverse-domain private-use redirect URIs', async () => {
    const reg = (u: string) => httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: 'uri check', redirect_uris: [u] }));
    for (const u of ['https://app.example/cb', 'http://127.0.0.1:33418/cb', 'http://[::1]/cb', 'http://localhost:8080/cb', 'com.example.app:/oauth2redirect', 'io.github.someone.client://callback']) {
      const r = await reg(u);
      expect(r.status, u).toBe(201);
      expect(JSON.parse(r.body).redirect_uris).toEqual([u]);
    }
    const refused: Array<[string, RegExp]> = [
      ['http://evil.example/cb', /loopback/],
      ['http://127.0.0.1.evil.example/cb', /loopback/],
      ['myapp:/cb', /reverse-domain/],
      ['ms-settings:privacy', /reverse-domain/],
      ['intent://scan/#Intent;scheme=zxing;end', /fragment/],
      ['javascript:alert(1)', /reverse-domain/],
      ['data:text/html,<script>alert(1)</script>', /reverse-domain/],
      ['file:///etc/passwd', /reverse-domain/],
      ['vbscript:msgbox', /reverse-domain/],
      ['https://user:pw@app.example/cb', /user name or password/],
      ['https://app.example/cb#', /fragment/],
      ['https://app.example/c\u202Eb', /ASCII/],
      ['com.example.app:/cb x', /ASCII/],
      ['.example:/cb', /absolute URI/],
    ];
    for (const [u, why] of refused) {
      const r = await reg(u);
      expect(r.status, u).toBe(400);
      const b = JSON.parse(r.body);
      expect(b.error, u).toBe('invalid_redirect_uri');
      expect(b.error_description, u).toMatch(/^redirect_uris: /);
      expect(b.error_description, u).toMatch(why);
    }
  });

  it('refuses a request without PKCE or with the plain method (a page until the owner approved the redirect URI, then back to it)', async () => {
    const id = await register();
    const { challenge, verifier } = pkce();
    // Not yet approved by the owner: the error is a page here, not a redirect.
    const fresh = await httpRequest(svc.url, 'GET', authorizePath(id, {}));
    expect(fresh.status).toBe(400);
    expect(fresh.headers.location).toBeUndefined();
    expect(fresh.body).toContain('<code>invalid_request</code>: code_challenge is required');
    // Once the owner approved a request to this redirect URI, errors go back to it (RFC 6749 section 4.1.2.1).
    const code = await codeFor(id, challenge);
    const none = await httpRequest(svc.url, 'GET', authorizePath(id, {}));
    expect(none.status).toBe(302);
    const loc = new URL(String(none.headers.location));
    expect(loc.searchParams.get('error')).toBe('invalid_request');
    expect(loc.searchParams.get('state')).toBe('s1');
    const plain = await httpRequest(svc.url, 'GET', authorizePath(id, { code_challenge: verifier, code_challenge_method: 'plain' }));
    expect(new URL(String(plain.headers.location)).searchParams.get('error_description')).toMatch(/S256/);
    const noMethod = await httpRequest(svc.url, 'GET', authorizePath(id, { code_challenge: challenge }));
    expect(new URL(String(noMethod.headers.location)).searchParams.get('error')).toBe('invalid_request');
    // A token request without the verifier is refused (and burns the code).
    const t = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: id }));
    expect(t.status).toBe(400);
    // A wrong verifier too.
    const code2 = await codeFor(id, challenge);
    const t2 = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'authorization_code', code: code2, redirect_uri: REDIRECT, client_id: id, code_verifier: pkce().verifier }));
    expect(JSON.parse(t2.body).error).toBe('invalid_grant');
  }, 60_000);

  it('refuses a reused code, and the reuse revokes what the code issued', async () => {
    const id = await register();
    const { challenge, verifier } = pkce();
    const code = await codeFor(id, challenge);
    const body = form({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: id, code_verifier: verifier, resource: svc.mcpUrl });
    const ok = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, body);
    expect(ok.status).toBe(200);
    const tokens = JSON.parse(ok.body);
    expect(tokens.token_type).toBe('Bearer');
    expect(tokens.expires_in).toBe(5);
    expect(ok.headers['cache-control']).toBe('no-store');
    const reuse = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, body);
    expect(reuse.status).toBe(400);
    expect(JSON.parse(reuse.body).error).toBe('invalid_grant');
    const r = await httpRequest(svc.url, 'POST', '/mcp', { ...MCP_HEADERS, authorization: `Bearer ${tokens.access_token}` }, INIT);
    expect(r.status).toBe(401);
  }, 60_000);

  it('refuses a code exchanged with another redirect URI, by another client, or for another resource', async () => {
    const id = await register();
    const other = await register();
    const { challenge, verifier } = pkce();
    const c1 = await codeFor(id, challenge);
    const wrongRedirect = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'authorization_code', code: c1, redirect_uri: 'http://127.0.0.1:9/other', client_id: id, code_verifier: verifier }));
    expect(JSON.parse(wrongRedirect.body).error).toBe('invalid_grant');
    const c2 = await codeFor(id, challenge);
    const wrongClient = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'authorization_code', code: c2, redirect_uri: REDIRECT, client_id: other, code_verifier: verifier }));
    expect(JSON.parse(wrongClient.body).error).toBe('invalid_grant');
    const c3 = await codeFor(id, challenge);
    const wrongResource = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'authorization_code', code: c3, redirect_uri: REDIRECT, client_id: id, code_verifier: verifier, resource: 'https://other.example/mcp' }));
    expect(JSON.parse(wrongResource.body).error).toBe('invalid_target');
    const authOther = await httpRequest(svc.url, 'GET', authorizePath(id, { code_challenge: challenge, code_challenge_method: 'S256', resource: 'https://other.example/mcp' }));
    expect(new URL(String(authOther.headers.location)).searchParams.get('error')).toBe('invalid_target');
  }, 60_000);

  it('a token issued for another resource (this server under another name) is refused', async () => {
    // Issued at http://localhost:PORT (resource http://localhost:PORT/mcp), presented at 127.0.0.1.
    const port = new URL(svc.url).port;
    const lh = `http://localhost:${port}`;
    const reg = await httpRequest(lh, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: 'lh', redirect_uris: [REDIRECT] }));
    const id = JSON.parse(reg.body).client_id;
    const { challenge, verifier } = pkce();
    const a = await httpRequest(lh, 'GET', `/oauth/authorize?${new URLSearchParams({ response_type: 'code', client_id: id, redirect_uri: REDIRECT, code_challenge: challenge, code_challenge_method: 'S256', resource: `${lh}/mcp` })}`);
    const consent = String(a.headers.location);
    const page = await httpRequest(lh, 'GET', consent, { cookie: session.cookie });
    const request = /name="request" value="([^"]+)"/.exec(page.body)![1]!;
    const post = await httpRequest(lh, 'POST', '/oauth/consent', { cookie: session.cookie, ...FORM }, form({ request, csrf: session.csrf, decision: 'approve', ts_workspace: 'on' }));
    const code = new URL(String(post.headers.location)).searchParams.get('code')!;
    const t = JSON.parse((await httpRequest(lh, 'POST', '/oauth/token', FORM, form({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: id, code_verifier: verifier }))).body);
    const okThere = await httpRequest(lh, 'POST', '/mcp', { ...MCP_HEADERS, authorization: `Bearer ${t.access_token}` }, INIT);
    expect(okThere.status).toBe(200);
    const here = await httpRequest(svc.url, 'POST', '/mcp', { ...MCP_HEADERS, authorization: `Bearer ${t.access_token}` }, INIT);
    expect(here.status).toBe(401);
    expect(String(here.headers['www-authenticate'])).toContain('another resource');
  }, 60_000);

  it('refuses an expired access token; the refresh token still works; revocation (RFC 7009) ends it', async () => {
    const id = await register();
    const { challenge, verifier } = pkce();
    const code = await codeFor(id, challenge);
    const t = JSON.parse((await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: id, code_verifier: verifier }))).body);
    expect((await httpRequest(svc.url, 'POST', '/mcp', { ...MCP_HEADERS, authorization: `Bearer ${t.access_token}` }, INIT)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 5500));
    const expired = await httpRequest(svc.url, 'POST', '/mcp', { ...MCP_HEADERS, authorization: `Bearer ${t.access_token}` }, INIT);
    expect(expired.status).toBe(401);
    const r = JSON.parse((await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'refresh_token', refresh_token: t.refresh_token, client_id: id }))).body);
    expect((await httpRequest(svc.url, 'POST', '/mcp', { ...MCP_HEADERS, authorization: `Bearer ${r.access_token}` }, INIT)).status).toBe(200);
    // Revoking the access token ends it at once.
    const rev = await httpRequest(svc.url, 'POST', '/oauth/revoke', FORM, form({ token: r.access_token, client_id: id }));
    expect(rev.status).toBe(200);
    expect((await httpRequest(svc.url, 'POST', '/mcp', { ...MCP_HEADERS, authorization: `Bearer ${r.access_token}` }, INIT)).status).toBe(401);
    // Revoking the refresh token ends the grant.
    await httpRequest(svc.url, 'POST', '/oauth/revoke', FORM, form({ token: r.refresh_token, client_id: id }));
    const gone = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'refresh_token', refresh_token: r.refresh_token, client_id: id }));
    expect(JSON.parse(gone.body).error).toBe('invalid_grant');
    // Unknown tokens: 200 per RFC 7009; an unknown client: 401.
    expect((await httpRequest(svc.url, 'POST', '/oauth/revoke', FORM, form({ token: 'nope', client_id: id }))).status).toBe(200);
    expect((await httpRequest(svc.url, 'POST', '/oauth/revoke', FORM, form({ token: 'nope', client_id: 'oauthc_nobody' }))).status).toBe(401);
  }, 60_000);

  it('a denied consent returns access_denied and issues nothing; bad grant types and bodies are refused', async () => {
    const id = await register();
    const { challenge } = pkce();
    const cb = await approve(new URL(svc.url + authorizePath(id, { code_challenge: challenge, code_challenge_method: 'S256' })), 'deny');
    expect(cb.searchParams.get('error')).toBe('access_denied');
    expect(cb.searchParams.get('code')).toBeNull();
    const g = await httpRequest(svc.url, 'POST', '/oauth/token', FORM, form({ grant_type: 'password', client_id: id }));
    expect(JSON.parse(g.body).error).toBe('unsupported_grant_type');
    // A denied request approves nothing: the client's errors are still a page, not a redirect.
    const scope = await httpRequest(svc.url, 'GET', authorizePath(id, { code_challenge: challenge, code_challenge_method: 'S256', scope: 'toolset:nonsense' }));
    expect(scope.status).toBe(400);
    expect(scope.headers.location).toBeUndefined();
    expect(scope.body).toContain('<code>invalid_scope</code>');
    const consentUnknown = await httpRequest(svc.url, 'GET', '/oauth/consent?request=forged', { cookie: session.cookie });
    expect(consentUnknown.status).toBe(400);
  }, 60_000);

  it('hostile input: markup in a client name is escaped, huge and deeply nested bodies are refused, token requests must be forms', async () => {
    const reg = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: '<script>alert(1)</script><img src=x onerror=alert(2)>', redirect_uris: [REDIRECT] }));
    expect(reg.status).toBe(201);
    const id = JSON.parse(reg.body).client_id;
    const { challenge } = pkce();
    const a = await httpRequest(svc.url, 'GET', authorizePath(id, { code_challenge: challenge, code_challenge_method: 'S256' }));
    const page = await httpRequest(svc.url, 'GET', String(a.headers.location), { cookie: session.cookie });
    expect(page.body).not.toContain('<script>');
    expect(page.body).not.toContain('<img');
    expect(page.body).toContain('&lt;script&gt;');
    // Format characters (a right-to-left override would reorder the page around the name) are
    // removed at registration, and the name is isolated and marked as the client's own claim.
    const bidi = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: 'Claude\u202E\u200F (verified)\u2066\n\tby Atelier\uFEFF', redirect_uris: [REDIRECT] }));
    expect(JSON.parse(bidi.body).client_name).toBe('Claude (verified) by Atelier');
    const bidiId = JSON.parse(bidi.body).client_id;
    const ba = await httpRequest(svc.url, 'GET', authorizePath(bidiId, { code_challenge: challenge, code_challenge_method: 'S256' }));
    const bpage = await httpRequest(svc.url, 'GET', String(ba.headers.location), { cookie: session.cookie });
    expect(bpage.body).toContain('<bdi><strong>Claude (verified) by Atelier</strong></bdi> (its name is chosen by the client itself and not verified;');
    expect(bpage.body).not.toMatch(/[\u202A-\u202E\u2066-\u2069\u200E\u200F\uFEFF]/);
    const listed = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/oauth/clients', { cookie: session.cookie })).body).clients as Array<{ name: string }>;
    for (const c of listed) expect(c.name).not.toMatch(/[\u202A-\u202E\u2066-\u2069\u200E\u200F\uFEFF]/);
    const onlyFormat = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: '\u202E\u202E', redirect_uris: [REDIRECT] }));
    expect(JSON.parse(onlyFormat.body).client_name).toBe('unnamed client');
    // Over the 2 MiB body limit: a 4xx answer, or (when the answer and the close come while this
    // client is still writing the body) the connection cut under it; never a registration.
    const huge = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: 'x'.repeat(3 * 1024 * 1024), redirect_uris: [REDIRECT] })).then(
      (r) => r.status,
      (e: NodeJS.ErrnoException) => e.code,
    );
    if (typeof huge === 'number') {
      expect(huge).toBeGreaterThanOrEqual(400);
      expect(huge).toBeLessThan(500);
    } else expect(['EPIPE', 'ECONNRESET']).toContain(huge);
    const deep = '{"redirect_uris":["' + REDIRECT + '"],"x":' + '['.repeat(5000) + ']'.repeat(5000) + '}';
    const d = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, deep);
    expect(d.status).toBeLessThan(500);
    const longName = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: 'n'.repeat(101), redirect_uris: [REDIRECT] }));
    expect(JSON.parse(longName.body).error).toBe('invalid_client_metadata');
    const badJson = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, '{not json');
    expect(badJson.status).toBe(400);
    const json = await httpRequest(svc.url, 'POST', '/oauth/token', { 'content-type': 'application/json' }, JSON.stringify({ grant_type: 'authorization_code', code: 'x', client_id: id }));
    expect(json.status).toBe(400);
    expect(JSON.parse(json.body).error).toBe('invalid_request');
    const longState = await httpRequest(svc.url, 'GET', authorizePath(id, { code_challenge: challenge, code_challenge_method: 'S256', state: 's'.repeat(2000) }));
    expect(longState.status).toBe(400);
    expect(longState.body).toContain('<code>invalid_request</code>: state too long');
    // A forged consent POST without a session issues nothing.
    const forged = await httpRequest(svc.url, 'POST', '/oauth/consent', FORM, form({ request: 'x', csrf: 'y', decision: 'approve' }));
    expect(forged.status).toBe(401);
    expect(forged.headers.location).toBeUndefined();
  }, 60_000);
});
