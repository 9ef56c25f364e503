/**
 * OAuth in a real browser (issue #31 item 9): playwright-core drives Debian's chromium through the
 * whole connect flow against the real `atelier serve`: the owner logs in, an MCP client (the
 * official one, registered by dynamic registration, its redirect URI a loopback http server of this
 * test) starts the authorization with PKCE, the consent page is shown under its own CSP, Approve is
 * clicked, the browser lands on the client's redirect URI with the code, and the client exchanges
 * it and calls a tool. Also Deny in the browser, and a hostile client name rendered on the page.
 * The other OAuth tests (oauth.test.ts) play the browser with raw HTTP, which no CSP constrains.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { Client, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client';
import { MemoryOAuthProvider } from '../fixtures/oauth-provider.js';
import { call, httpRequest, startService, type Service } from './harness.js';

let svc: Service;
let browser: Browser;
let ctx: BrowserContext;
let callbackServer: Server;
let redirectUri = '';
/** Every request the client's redirect URI received (the browser's landing after consent). */
const callbacks: URL[] = [];
let waiters: Array<(u: URL) => void> = [];

/**
 * Resolves with the next request to the client's redirect URI; fails, naming what the browser
 * refused, when it never comes (a CSP that blocks the form or its redirect leaves the page still).
 */
function nextCallback(page: Page, violations: string[]): Promise<URL> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(async () => {
      const shown = await page.textContent('body', { timeout: 2000 }).catch(() => '');
      reject(new Error(`the browser never reached the client's redirect URI; refused by the browser: ${JSON.stringify(violations)}; it shows ${page.url()}: ${shown?.slice(0, 300)}`));
    }, 20_000);
    waiters.push((u) => {
      clearTimeout(timer);
      resolve(u);
    });
  });
}

beforeAll(async () => {
  svc = await startService({ args: ['--unsafe-dev-no-sandbox'] });
  callbackServer = createServer((req, res) => {
    const u = new URL(req.url ?? '/', redirectUri);
    if (u.pathname !== '/callback') {
      // The browser's own requests (a favicon) are not the redirect.
      res.writeHead(404).end();
      return;
    }
    callbacks.push(u);
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end('<!doctype html><title>client callback</title><p>Back in the client.</p>');
    const w = waiters;
    waiters = [];
    for (const f of w) f(u);
  });
  await new Promise<void>((r) => callbackServer.listen(0, '127.0.0.1', () => r()));
  redirectUri = `http://127.0.0.1:${(callbackServer.address() as AddressInfo).port}/callback`;
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  // The owner logs in once, by the one-time link printed at start.
  ctx = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  const p = await ctx.newPage();
  await p.goto(svc.loginLink);
  await p.waitForSelector('main.content[data-page="overview"]');
  await p.close();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await new Promise((r) => callbackServer?.close(r));
  await svc?.dispose();
});


/**
 * Bounds a browser step that has no timeout of its own (opening and closing a tab), failing with
 * its name instead of leaving the test to run into vitest's timeout with nothing said.
 */
async function bounded<T>(what: string, work: Promise<T>, ms = 20_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([work, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`the browser did not finish "${what}" in ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** A page that records what the browser refused by a Content-Security-Policy. */
async function watchedPage(): Promise<{ page: Page; violations: string[] }> {
  const page = await bounded('open a tab', ctx.newPage());
  // Every wait fails by itself, naming what it waited for, well before the test's own timeout.
  page.setDefaultTimeout(15_000);
  page.setDefaultNavigationTimeout(15_000);
  const violations: string[] = [];
  page.on('console', (m) => {
    if (/Content.Security.Policy|violates|Refused to/i.test(m.text())) violations.push(m.text());
  });
  page.on('pageerror', (e) => violations.push(`page error: ${e.message}`));
  return { page, violations };
}

/** The official client's first attempt: 401, discovery, dynamic registration, the authorization URL (PKCE S256). */
async function startConnect(provider: MemoryOAuthProvider): Promise<StreamableHTTPClientTransport> {
  const transport = new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { authProvider: provider });
  const connecting = new Client({ name: 'oauth-browser-e2e', version: '1.0.0' }).connect(transport);
  const bound = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the client did not finish discovery and registration in 20 s')), 20_000).unref());
  await expect(Promise.race([connecting, bound])).rejects.toThrow(UnauthorizedError);
  expect(provider.info.client_id).toMatch(/^oauthc_/);
  expect(provider.authUrl!.searchParams.get('code_challenge_method')).toBe('S256');
  return transport;
}

describe('OAuth in chromium', () => {
  it('the whole connect flow: consent page under its own CSP, Approve, redirect to the client with the code, token, a tool call', async () => {
    const provider = new MemoryOAuthProvider({ redirectUrl: redirectUri, clientName: 'browser e2e client' });
    const transport = await startConnect(provider);
    const { page, violations } = await watchedPage();
    const consent = await page.goto(provider.authUrl!.toString());
    expect(new URL(page.url()).pathname).toBe('/oauth/consent');
    // The consent page keeps its own policy: its form may go to this origin and the client's redirect origin.
    const csp = consent!.headers()['content-security-policy']!;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain(`form-action 'self' ${new URL(redirectUri).origin}`);
    await page.waitForSelector('button[value=approve]');
    expect(await page.textContent('bdi')).toBe('browser e2e client');
    expect(await page.textContent('main')).toMatch(/name is chosen by the client itself/);

    const landed = nextCallback(page, violations);
    await page.click('button[value=approve]');
    const cb = await landed;
    await page.waitForURL((u) => u.origin === new URL(redirectUri).origin);
    expect(await page.textContent('p')).toBe('Back in the client.');
    expect(violations).toEqual([]);
    expect(cb.pathname).toBe('/callback');
    expect(cb.searchParams.get('state')).toBe(provider.authUrl!.searchParams.get('state'));
    expect(cb.searchParams.get('iss')).toBe(svc.url);
    const code = cb.searchParams.get('code')!;
    expect(code).toBeTruthy();
    await bounded('close the tab', page.close());

    // The client exchanges the code (PKCE verifier) and calls a tool with its token.
    await transport.finishAuth(code, cb.searchParams.get('iss') ?? undefined);
    expect(provider.saved.access_token).toMatch(/^atla_/);
    const c = new Client({ name: 'oauth-browser-e2e', version: '1.0.0' });
    await c.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { authProvider: provider }));
    const r = await call(c, 'workspace_list', {});
    expect(r.ok).toBe(true);
    await c.close();
  }, 150_000);

  it('Deny in the browser returns access_denied to the client and issues nothing', async () => {
    const provider = new MemoryOAuthProvider({ redirectUrl: redirectUri, clientName: 'browser e2e denied' });
    await startConnect(provider);
    const { page, violations } = await watchedPage();
    await page.goto(provider.authUrl!.toString());
    await page.waitForSelector('button[value=deny]');
    const landed = nextCallback(page, violations);
    await page.click('button[value=deny]');
    const cb = await landed;
    // The tab has landed on the client's page before it is closed (as in the Approve test): a tab
    // closed while that navigation was still under way hung chromium's close for 20 s once.
    await page.waitForURL((u) => u.origin === new URL(redirectUri).origin);
    expect(await page.textContent('p')).toBe('Back in the client.');
    expect(cb.searchParams.get('error')).toBe('access_denied');
    expect(cb.searchParams.get('code')).toBeNull();
    expect(violations).toEqual([]);
    await bounded('close the tab', page.close());
  }, 150_000);

  it('a native app on the IPv6 loopback ([::1]) gets its code too', async () => {
    let landed: (u: URL) => void = () => undefined;
    const arrived = new Promise<URL>((r) => (landed = r));
    const v6 = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('ok');
      landed(new URL(req.url ?? '/', 'http://[::1]'));
    });
    await new Promise<void>((r) => v6.listen(0, '::1', () => r()));
    try {
      const uri = `http://[::1]:${(v6.address() as AddressInfo).port}/cb`;
      const reg = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: 'v6 app', redirect_uris: [uri] }));
      const id = JSON.parse(reg.body).client_id;
      const q = new URLSearchParams({ response_type: 'code', client_id: id, redirect_uri: uri, code_challenge: 'b'.repeat(43), code_challenge_method: 'S256', state: 'v6' });
      const { page, violations } = await watchedPage();
      await page.goto(`${svc.url}/oauth/authorize?${q}`);
      await page.waitForSelector('button[value=approve]');
      await page.click('button[value=approve]');
      let timer: NodeJS.Timeout | undefined;
      const cb = await Promise.race([
        arrived,
        new Promise<never>((_, reject) => {
          timer = setTimeout(async () => reject(new Error(`no request reached ${uri}; refused by the browser: ${JSON.stringify(violations)}; it shows ${page.url()}: ${(await page.textContent('body', { timeout: 2000 }).catch(() => ''))?.slice(0, 300)}`)), 20_000);
        }),
      ]).finally(() => clearTimeout(timer));
      expect(cb.searchParams.get('state')).toBe('v6');
      expect(cb.searchParams.get('code')).toBeTruthy();
      expect(violations).toEqual([]);
      // Landed before the tab closes (a close during that navigation can hang chromium).
      await page.waitForURL((u) => u.hostname === '[::1]');
      await bounded('close the tab', page.close());
    } finally {
      await new Promise((r) => v6.close(r));
    }
  }, 150_000);

  it('a hostile client name is isolated in <bdi>, without format characters, and marked as self-declared', async () => {
    // U+202E (right-to-left override) and friends would reorder the rest of the page's sentence.
    const hostile = 'Atelier\u202E\u2066 official \u200Bapp\u2069\u061C\uFEFF';
    const reg = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: hostile, redirect_uris: [redirectUri] }));
    expect(reg.status).toBe(201);
    const body = JSON.parse(reg.body);
    expect(body.client_name).toBe('Atelier official app');
    const q = new URLSearchParams({ response_type: 'code', client_id: body.client_id, redirect_uri: redirectUri, code_challenge: 'a'.repeat(43), code_challenge_method: 'S256', state: 'x' });
    const { page, violations } = await watchedPage();
    await page.goto(`${svc.url}/oauth/authorize?${q}`);
    await page.waitForSelector('button[value=approve]');
    const html = await page.content();
    expect(html).not.toMatch(/[\u202A-\u202E\u2066-\u2069\u200B-\u200F\u061C\uFEFF]/);
    expect(await page.textContent('bdi')).toBe('Atelier official app');
    // The sentence around the name reads in order, the name isolated in the middle of it.
    const intro = await page.textContent('p.client');
    expect(intro).toMatch(/^The client Atelier official app \(its name is chosen by the client itself and not verified; id oauthc_/);
    expect(violations).toEqual([]);
    await bounded('close the tab', page.close());
  }, 60_000);
});
