/**
 * The owner's dashboard (issue #15) in a real browser: playwright-core drives Debian's chromium
 * against the real `atelier serve` (with a real workspace on the loopback git host and the fake
 * model provider behind the embedded gateway). Logins, provider keys that never come back, a
 * profile drafted over MCP and activated on the page then routed through the gateway, a privileged
 * command approved on the page then run, a spend policy set on the page then enforced by the
 * gateway, an MCP token revoked on the page then refused, CSRF on every state-changing path,
 * hostile input, and screenshots of every page at laptop and phone widths.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, httpRequest as rawRequest, ROOT, runCli, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import { startFakeProvider, type FakeProvider } from '../fixtures/fake-provider.js';
import type { GitHost } from '../fixtures/githost.js';
import { until } from './gateway-harness.js';
import { listedTools } from './clients-fixture.js';

const PASSWORD = 'correct horse battery staple';
const PROVIDER_KEY = 'sk-dash-provider-key-' + 'K'.repeat(28);
const ARTIFACTS = join(ROOT, 'test-artifacts', 'dashboard');
const DOCS_SHOTS = join(ROOT, 'docs', 'dashboard');
const PAGES = ['overview', 'approvals', 'keys', 'profiles', 'spend', 'agents', 'workspaces', 'previews', 'repositories', 'environments', 'mcp', 'audit'];
const PRICING = { inputMicrosPerMillionTokens: 2_000_000, outputMicrosPerMillionTokens: 8_000_000, cachedReadMicrosPerMillionTokens: 500_000, cachedWriteMicrosPerMillionTokens: null };
const LIMITS = { maxInputTokens: 100_000, maxOutputTokens: 8_000, maxCostMicros: 5_000_000 };

/** Raw HTTP with a Content-Length on bodies (node sends DELETE bodies without one otherwise). */
const httpRequest = (base: string, method: string, path: string, headers: Record<string, string> = {}, body?: string) =>
  rawRequest(base, method, path, body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) }, body);

let fake: FakeProvider;
let host: GitHost;
let svc: Service;
let browser: Browser;
let ctx: BrowserContext;
let page: Page;
let mcp: Client;
let ws = '';
let spawnedAgent = '';
const bodies: string[] = []; // every response body the browser received
const cspViolations: string[] = [];

async function newContext(width = 1366, height = 900): Promise<BrowserContext> {
  const c = await browser.newContext({ viewport: { width, height }, deviceScaleFactor: 1 });
  return c;
}

function watch(p: Page): Page {
  p.on('response', async (r) => {
    try {
      bodies.push(await r.text());
    } catch {
      // redirects and aborted responses have no body
    }
  });
  p.on('console', (m) => {
    if (/Content.Security.Policy|Refused to/i.test(m.text())) cspViolations.push(m.text());
  });
  p.on('pageerror', (e) => cspViolations.push(`page error: ${e.message}`));
  return p;
}

async function go(p: Page, id: string): Promise<void> {
  await p.goto(`${svc.url}/#/${id}`);
  await p.waitForSelector(`main.content[data-page="${id}"]`);
  await p.waitForLoadState('networkidle');
  // A hash route is no new document, so the load state may already be idle from the page before
  // while this page's data is still on its way: wait until nothing on it says Loading….
  await p.waitForFunction(() => !document.querySelector('main.content')?.textContent?.includes('Loading…'));
}

/** Session cookie and CSRF token of the browser's session, for direct REST checks. */
async function sessionOf(c: BrowserContext): Promise<{ cookie: string; csrf: string }> {
  const cookie = (await c.cookies()).find((k) => k.name === 'atelier_session')!;
  const h = `atelier_session=${cookie.value}`;
  const s = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/session', { cookie: h })).body);
  return { cookie: h, csrf: s.csrfToken };
}

/** A gateway lease as the runner issues one for an agent, and a chat request under it. */
async function gatewayLease(agentId: string, profileId: string, revision: number): Promise<(body: unknown) => Promise<Response>> {
  const gwUrl = await until(() => /"url":"(http:\/\/127\.0\.0\.1:\d+)"/.exec(svc.stderr())?.[1]);
  const secret = readFileSync(join(svc.dataDir, 'state', 'gateway-admin.secret'), 'utf8').trim();
  const lease = await fetch(gwUrl + '/admin/leases', {
    method: 'POST',
    headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ agentId, profileId, revision, budgets: { maxInputTokens: 100_000, maxOutputTokens: 8_000, maxCostMicros: 2_000_000 }, expiresAt: new Date(Date.now() + 600_000).toISOString() }),
  }).then((r) => r.json());
  expect(lease.token).toMatch(/^atlg_/);
  return (body) => fetch(gwUrl + '/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${lease.token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

beforeAll(async () => {
  fake = await startFakeProvider();
  host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/dash', REPO_FILES)).url;
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-dash-'));
  // The owner password is set before start (setting it ends every session).
  const pw = await runCli(['owner', 'set-password', '--data-dir', dataDir], { input: PASSWORD + '\n' });
  expect(pw.code).toBe(0);
  svc = await startWorkspaceService(host, { dataDir, config: { providers: { provider_a: { baseUrl: fake.url + '/v1' } } } });
  mcp = await connectV2(svc);
  const opened = await call(mcp, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'dash-open-1' });
  if (!opened.ok) throw new Error(opened.text);
  ws = opened.result.workspaceId as string;
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  mkdirSync(ARTIFACTS, { recursive: true });
}, 180_000);

afterAll(async () => {
  await mcp?.close().catch(() => undefined);
  await browser?.close();
  await svc?.dispose();
  await host?.close();
  await fake?.close();
});

describe('dashboard in a real browser', () => {
  it('logs in by the one-time link (once), serves a strict CSP, and runs no inline script', async () => {
    ctx = await newContext();
    page = watch(await ctx.newPage());
    const first = await page.goto(svc.loginLink);
    expect(first!.status()).toBe(200);
    await page.waitForSelector('main.content[data-page="overview"]');
    const csp = first!.headers()['content-security-policy']!;
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    expect(csp).toContain("frame-ancestors 'none'");
    const html = await (await httpRequest(svc.url, 'GET', '/', (await sessionOf(ctx)))).body;
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/); // every script is a file of this origin
    expect(html).not.toMatch(/\son[a-z]+=/i);
    // The link works once.
    const again = await httpRequest(svc.url, 'GET', new URL(svc.loginLink).pathname + new URL(svc.loginLink).search);
    expect(again.status).toBe(401);
    const cookie = (await ctx.cookies()).find((c) => c.name === 'atelier_session')!;
    expect(cookie.httpOnly).toBe(true);
    expect(cookie.sameSite).toBe('Strict');
    expect(cookie.expires).toBeGreaterThan(Date.now() / 1000);
    expect(cookie.expires).toBeLessThanOrEqual(Date.now() / 1000 + 12 * 3600 + 60); // the session expires
    expect(await page.textContent('.topbar')).toMatch(/session ends \d\d:\d\d UTC/);
  });

  it('logs in by password (a wrong one is refused) and logs out', async () => {
    const c = await newContext(390, 844);
    const p = watch(await c.newPage());
    await p.goto(svc.url + '/');
    await p.fill('input[name=password]', 'not the password at all');
    await p.click('button[type=submit]');
    await p.waitForSelector('.error');
    expect(await p.textContent('.error')).toMatch(/Wrong password/);
    await p.fill('input[name=password]', PASSWORD);
    await p.click('button[type=submit]');
    await p.waitForSelector('main.content[data-page="overview"]');
    await p.click('text=Log out').catch(async () => {
      // On a phone the button is in the top bar too.
      await p.click('.topbar button:has-text("Log out")');
    });
    await p.waitForSelector('input[name=password]');
    expect((await httpRequest(svc.url, 'GET', '/api/v1/session', await sessionOf(c).catch(() => ({ cookie: '', csrf: '' })))).status).toBe(401);
    await c.close();
  });

  it('adds a provider key on the page (checks and rotates it there); the key is in no page, response body or log', async () => {
    await go(page, 'keys');
    await page.selectOption('form[data-testid=add-key] select[name=provider]', 'provider_a');
    await page.fill('form[data-testid=add-key] input[name=label]', 'main key');
    await page.fill('form[data-testid=add-key] input[name=key]', PROVIDER_KEY);
    await page.click('form[data-testid=add-key] button.primary');
    await page.waitForSelector('li[data-credential] >> text=main key');
    expect(await page.inputValue('form[data-testid=add-key] input[name=key]')).toBe('');
    // A connection check from the page, with its probes.
    const row = page.locator('li[data-credential]', { hasText: 'main key' });
    await row.locator('button:has-text("Check connection")').click();
    await row.locator('input[name=model]').fill('model-check');
    await row.locator('button:has-text("Run check")').click();
    await row.locator('.probes li').first().waitFor();
    expect(await row.locator('.probes').textContent()).toMatch(/pass/);
    // Rotate to the same key (a new key version); the field is cleared.
    await row.locator('button:has-text("Rotate")').click();
    await row.locator('input[name=key]').fill(PROVIDER_KEY);
    await row.locator('form button.primary:has-text("Rotate")').click();
    await row.locator('text=key version 2').waitFor();
    for (const id of PAGES) {
      await go(page, id);
      expect(await page.content()).not.toContain(PROVIDER_KEY);
    }
    expect(bodies.length).toBeGreaterThan(20);
    for (const b of bodies) expect(b.includes(PROVIDER_KEY)).toBe(false);
    expect(svc.stdout() + svc.stderr()).not.toContain(PROVIDER_KEY);
  });

  it('activates a profile drafted over MCP (its refused escalation shown) and the gateway routes through it', async () => {
    const creds = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/provider-credentials', { cookie: (await sessionOf(ctx)).cookie })).body).credentials;
    const credentialId = creds[0].id as string;
    const made = await call(mcp, 'model_profile_create', { profileId: 'drafted', displayName: 'Drafted coder', credentialId, model: 'model-d', apiMode: 'chat-completions', pricing: PRICING, limits: LIMITS, maxProxyOperations: [], idempotencyKey: 'dash-draft-1' });
    expect(made.ok).toBe(true);
    const esc = await call(mcp, 'model_profile_update', { profileId: 'drafted', expectedGeneration: 1, limits: { ...LIMITS, maxCostMicros: 9_000_000 }, idempotencyKey: 'dash-draft-esc' });
    expect(!esc.ok && esc.error.code).toBe('OWNER_APPROVAL_REQUIRED');

    await go(page, 'overview');
    await page.waitForSelector('#attention >> text=drafted');
    await go(page, 'profiles');
    const card = page.locator('li[data-profile="drafted"]');
    await card.locator('text=awaits activation').waitFor();
    await card.locator('text=drafted over MCP').waitFor();
    await card.locator('text=Escalations refused over MCP').waitFor();
    expect(await card.textContent()).toContain('raises maxCostMicros');
    await card.locator('[data-testid="activate-drafted-1"]').click();
    await card.locator('.badge.ok:text-is("active")').first().waitFor();

    // The gateway now routes the profile (a lease as the runner issues for an agent).
    const chat = await gatewayLease('agent_' + 'd'.repeat(22), 'drafted', 1);
    fake.reset();
    const ok = await chat({ model: 'x', messages: [{ role: 'user', content: 'hi' }] });
    expect(ok.status).toBe(200);
    expect(fake.requests.at(-1)!.body.model).toBe('model-d');
    expect(fake.requests.at(-1)!.headers.authorization).toBe(`Bearer ${PROVIDER_KEY}`);

    // And a real agent, spawned over MCP, routes through the profile the owner activated here.
    fake.reset();
    const spawned = await call(mcp, 'agent_spawn', { workspaceId: ws, prompt: 'Say hello.', profileId: 'drafted', proxyOperations: [], idempotencyKey: 'dash-agent-1', ttlSeconds: 60 });
    if (!spawned.ok) throw new Error(spawned.text);
    spawnedAgent = spawned.result.agentId as string;
    let status = '';
    for (let i = 0; i < 120 && !['SUCCEEDED', 'FAILED', 'LIMIT_EXCEEDED', 'TIMED_OUT', 'CANCELLED'].includes(status); i++) {
      const st = await call(mcp, 'agent_status', { workspaceId: ws, agentId: spawnedAgent });
      if (!st.ok) throw new Error(st.text);
      status = st.result.status as string;
      if (status !== 'SUCCEEDED') await new Promise((r) => setTimeout(r, 250));
    }
    expect(status).toBe('SUCCEEDED');
    expect(fake.requests.some((r) => r.body.model === 'model-d' && r.headers.authorization === `Bearer ${PROVIDER_KEY}`)).toBe(true);

    // A spend policy set on the Spend page: the gateway refuses the next request by it.
    await go(page, 'spend');
    await page.waitForSelector('.chart .uplot');
    await page.fill('form[data-testid=policies] input[name=dailyCapMicros]', '0.0001');
    await page.click('form[data-testid=policies] button.primary');
    await page.waitForSelector('text=Saved and pushed to the gateway.');
    const pol = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/spend-policies', { cookie: (await sessionOf(ctx)).cookie })).body);
    expect(pol.policies.dailyCapMicros).toBe(100);
    const refused = await chat({ model: 'x', messages: [{ role: 'user', content: 'again' }] });
    expect(refused.status).not.toBe(200);
    expect(await refused.text()).toMatch(/policy/);
    // The spend charts show the request under the profile and the agent.
    const series = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/spend-series?range=month', { cookie: (await sessionOf(ctx)).cookie })).body);
    expect(series.buckets.length).toBeGreaterThanOrEqual(28);
    expect(series.rows.some((r: { profileId: string; agentId: string; settledMicros: number }) => r.profileId === 'drafted' && r.agentId === 'agent_' + 'd'.repeat(22) && r.settledMicros > 0)).toBe(true);
    await page.fill('form[data-testid=policies] input[name=dailyCapMicros]', '');
    await page.click('form[data-testid=policies] button.primary');
    await page.waitForSelector('text=Saved and pushed to the gateway.');
  });

  it('approves a privileged command an MCP client asked for (full text, digest, markup shown as text) and the command runs', async () => {
    const command = 'id -u; echo "<img src=x onerror=alert(1)>" ' + 'x'.repeat(600) + ' END-OF-COMMAND';
    let dialogs = 0;
    const onDialog = (d: { dismiss(): Promise<void> }) => {
      dialogs++;
      void d.dismiss();
    };
    page.on('dialog', onDialog);
    const refused = await call(mcp, 'exec_run', { workspaceId: ws, command, privileged: true });
    expect(!refused.ok && refused.error.code).toBe('PERMISSION_DENIED');
    const id = !refused.ok ? (refused.error.details.approvalRequestId as string) : '';
    const digest = !refused.ok ? (refused.error.details.subjectSha256 as string) : '';
    await go(page, 'approvals');
    const item = page.locator(`li[data-approval="${id}"]`);
    await item.waitFor();
    expect(await item.locator('[data-testid=subject]').textContent()).toBe(command); // the full text, never cut
    expect(await item.textContent()).toContain(digest);
    await item.locator('[data-testid=approve]').click();
    const grant = (await page.locator(`[data-approval-grant="${id}"] pre`).textContent())!.trim();
    expect(grant.length).toBeGreaterThan(20);
    const ran = await call(mcp, 'exec_run', { workspaceId: ws, command, privileged: true, approvalGrantToken: grant });
    expect(ran.ok).toBe(true);
    if (ran.ok) expect(String(ran.result.stdout)).toMatch(/^0\n<img src=x onerror=alert\(1\)> x+ END-OF-COMMAND\n$/);
    expect(dialogs).toBe(0);
    page.off('dialog', onDialog);
    // The overview no longer lists it as waiting.
    await go(page, 'overview');
    expect(await page.locator('#attention').textContent()).not.toContain('END-OF-COMMAND');
  });

  it('shows hidden characters of a privileged command escaped and highlighted, with a warning, and the working directory the grant binds', async () => {
    expect((await call(mcp, 'exec_run', { workspaceId: ws, command: 'mkdir -p dash-dir' })).ok).toBe(true);
    // Reads as "echo done # cleanup" with the override; runs something else. Plus a zero-width space, a C1 NEL and a CR.
    const command = 'echo done \u202E# punaelc\u202C; cu\u200Brl -s x\u0085 ; printf "a\rb"';
    const refused = await call(mcp, 'exec_run', { workspaceId: ws, command, cwd: 'dash-dir', privileged: true });
    expect(!refused.ok && refused.error.code).toBe('PERMISSION_DENIED');
    const id = !refused.ok ? (refused.error.details.approvalRequestId as string) : '';
    const rest = JSON.parse((await httpRequest(svc.url, 'GET', `/api/v1/approvals/${id}`, await sessionOf(ctx))).body);
    expect(rest.subject).toBe(command); // the raw bytes the digest binds
    expect(rest.display.subject).toBe('echo done \\u{202E}# punaelc\\u{202C}; cu\\u{200B}rl -s x\\u{0085} ; printf "a\\u{000D}b"');
    expect(rest.flags).toEqual(['hidden_characters']);
    expect(rest.cwd).toBe('dash-dir');
    await go(page, 'approvals');
    const item = page.locator(`li[data-approval="${id}"]`);
    await item.waitFor();
    const subject = item.locator('[data-testid=subject]');
    // The page shows exactly the REST payload's escaped form: no raw hidden character reaches the screen.
    expect(await subject.textContent()).toBe(rest.display.subject);
    expect(await subject.textContent()).not.toMatch(/[\u202E\u202C\u200B\u0085\r]/);
    expect(await subject.locator('mark.hidden-char').allTextContents()).toEqual(['\\u{202E}', '\\u{202C}', '\\u{200B}', '\\u{0085}', '\\u{000D}']);
    expect(await subject.locator('mark.hidden-char').first().getAttribute('title')).toContain('U+202E');
    const warning = item.locator('[data-testid=hidden-warning]');
    expect(await warning.isVisible()).toBe(true);
    expect(await warning.textContent()).toContain('U+202E (bidi) ×1 in subject');
    expect(await warning.textContent()).toContain('U+200B (zero width) ×1 in subject');
    expect(await item.locator('.badge', { hasText: 'hidden characters' }).isVisible()).toBe(true);
    expect(await item.locator('[data-testid=cwd]').textContent()).toContain('/workspace/dash-dir');
    // The highlight is visible: the escape's background differs from the subject's.
    const [markBg, preBg] = await Promise.all([subject.locator('mark.hidden-char').first().evaluate((e) => getComputedStyle(e).backgroundColor), subject.evaluate((e) => getComputedStyle(e).backgroundColor)]);
    expect(markBg).not.toBe(preBg);
    // The overview's waiting list flags it too, and shows the escaped form.
    await go(page, 'overview');
    const waiting = page.locator('#attention li', { hasText: 'punaelc' });
    expect(await waiting.textContent()).toContain('\\u{202E}');
    expect(await waiting.textContent()).toContain('hidden characters');
  });

  it('creates an MCP token (shown once), shows the client lines, and a revoked token is refused', async () => {
    await go(page, 'mcp');
    const setup = await page.textContent('main.content');
    expect(setup).toContain(`claude mcp add --transport http atelier ${svc.url}/mcp`);
    expect(setup).toContain('[mcp_servers.atelier]');
    expect(setup).toContain(`url = "${svc.url}/mcp"`);
    // Which toolsets for which client: every pick that names toolsets fits the cap its row states
    // (the number a cap starts with; docs/clients.md, "Tool caps").
    const rows = await page.locator('[data-testid=client-presets] tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent!.trim())));
    expect(rows.map((r) => r[0])).toEqual(expect.arrayContaining(['Claude Code', 'Codex', 'VS Code (Copilot)', 'Cursor', 'Windsurf', 'Gemini CLI', 'opencode']));
    let checked = 0;
    for (const [client, cap, pick] of rows) {
      const toolsets = /^([a-z,-]+)(?: \(or all\))?$/.exec(pick!)?.[1];
      const limit = Number(/^\d+/.exec(cap!)?.[0]);
      if (!toolsets || !limit) continue;
      const seen = await listedTools(svc, { 'X-MCP-Toolsets': toolsets });
      expect(seen.length, `${client}: ${toolsets}`).toBeGreaterThan(0);
      expect(seen.length, `${client}: ${toolsets} under ${cap}`).toBeLessThanOrEqual(limit);
      checked++;
    }
    expect(checked).toBeGreaterThanOrEqual(5);
    // The OAuth section (GET /api/v1/oauth/clients, docs/access.md): no client has connected in this test.
    expect(setup).toContain('Connected OAuth clients');
    expect(setup).toContain('No OAuth client is connected.');
    await page.fill('form[data-testid=create-token] input[name=name]', 'browser test');
    await page.click('form[data-testid=create-token] button.primary');
    const token = (await page.locator('[data-testid=new-token] pre').textContent())!.trim();
    expect(token).toMatch(/^atl_/);
    const client = await connectV2(svc, token);
    expect((await call(client, 'workspace_list', {})).ok).toBe(true);
    await client.close();
    // Shown once: a reload lists the prefix only.
    await page.reload();
    await page.waitForSelector('text=browser test');
    expect(await page.content()).not.toContain(token);
    page.once('dialog', (d) => void d.accept());
    const row = page.locator('tr[data-token]', { hasText: 'browser test' });
    await row.locator('button:has-text("Revoke")').click();
    await page.waitForSelector('tr.muted >> text=browser test');
    await expect(connectV2(svc, token).then((c) => call(c, 'workspace_list', {}))).rejects.toThrow();
  });

  it('shows workspaces, agents, repositories, environments and the audit log with server-side filters', async () => {
    await go(page, 'workspaces');
    await page.waitForSelector(`text=${ws}`);
    await go(page, 'agents');
    await page.waitForSelector(`text=${spawnedAgent}`);
    const agentRow = page.locator(`li[data-agent="${spawnedAgent}"]`);
    expect(await agentRow.textContent()).toContain('SUCCEEDED');
    expect(await agentRow.textContent()).toMatch(/cost \$[\d.]+ \/ \$/);
    await agentRow.locator('button:has-text("Log tail")').click();
    await page.locator(`[data-testid="log-${spawnedAgent}"]`).waitFor();
    expect(await page.locator(`[data-testid="log-${spawnedAgent}"]`).textContent()).toMatch(/SUCCEEDED|status/);
    expect(await page.content()).not.toContain(PROVIDER_KEY);
    await go(page, 'repositories');
    await page.waitForSelector(`text=${host.url}/approved/*`);
    await page.waitForSelector('text=githost fixture');
    await page.fill('input[name=rule]', 'http://not-https.example/x');
    await page.click('button:has-text("Add rule")');
    await page.waitForSelector('.error >> text=https');
    await page.fill('input[name=rule]', `${host.url}/approved/extra.git`);
    await page.click('button:has-text("Add rule")');
    await page.waitForSelector(`code:text-is("${host.url}/approved/extra.git")`);
    await page.fill('textarea[name=pem]', '-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----');
    await page.click('button:has-text("Add certificate")');
    await page.waitForSelector('.error >> text=pem');

    await go(page, 'environments');
    const globalCard = page.locator('section.card', { hasText: 'Global (every workspace)' });
    await globalCard.locator('input[name=name]').fill('DASH_SECRET');
    await globalCard.locator('input[name=value]').fill('s3cret-value-never-back-' + 'V'.repeat(20));
    await globalCard.locator('button:has-text("Set")').click();
    await globalCard.locator('code:text-is("DASH_SECRET")').waitFor();
    expect(await page.content()).not.toContain('s3cret-value-never-back-');

    // Enough entries for a second page of 50.
    const sess = await sessionOf(ctx);
    for (let i = 0; i < 55; i++) {
      const body = JSON.stringify({ value: String(i) });
      const r = await httpRequest(svc.url, 'PUT', `/api/v1/environments/global/entries/PAGING_${i}`, { cookie: sess.cookie, 'x-csrf-token': sess.csrf, 'content-type': 'application/json' }, body);
      expect(r.status).toBe(200);
    }
    await go(page, 'audit');
    await page.fill('input[name=action]', 'token_revoke');
    await page.click('button:has-text("Apply")');
    await page.waitForFunction(() => document.querySelectorAll('table.audit tbody tr').length === 1);
    expect(await page.textContent('table.audit tbody')).toContain('dashboard');
    await page.fill('input[name=action]', '');
    await page.click('button:has-text("Apply")');
    await page.waitForFunction(() => document.querySelectorAll('table.audit tbody tr').length === 50);
    const firstTop = await page.textContent('table.audit tbody tr');
    await page.click('button:has-text("Older")');
    await page.waitForSelector('text=page 2');
    await page.waitForFunction((t) => document.querySelector('table.audit tbody tr')?.textContent !== t, firstTop);
    await page.click('button:has-text("Newer")');
    await page.waitForFunction((t) => document.querySelector('table.audit tbody tr')?.textContent === t, firstTop);
    const { cookie } = await sessionOf(ctx);
    const bad = await httpRequest(svc.url, 'GET', '/api/v1/audit-log?since=yesterday', { cookie });
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.body).error.details.field).toBe('since');
    expect((await httpRequest(svc.url, 'GET', '/api/v1/audit-log?outcome=maybe', { cookie })).status).toBe(400);
  });

  it('refuses every state-changing path without the CSRF token (and with a wrong one)', async () => {
    const { cookie, csrf } = await sessionOf(ctx);
    const paths: Array<[string, string, unknown]> = [
      ['POST', '/api/v1/provider-credentials', { provider: 'provider_a', key: 'sk-x' }],
      ['POST', '/api/v1/provider-credentials/cred_x/rotate', { key: 'sk-x' }],
      ['POST', '/api/v1/provider-credentials/cred_x/disable', {}],
      ['DELETE', '/api/v1/provider-credentials/cred_x', undefined],
      ['POST', '/api/v1/agent-model-profiles/drafted/activate', {}],
      ['POST', '/api/v1/agent-model-profiles/drafted/disable', {}],
      ['DELETE', '/api/v1/agent-model-profiles/drafted', undefined],
      ['POST', '/api/v1/approvals/approval_x/approve', {}],
      ['POST', '/api/v1/approvals/approval_x/deny', {}],
      ['PUT', '/api/v1/spend-policies', { dailyCapMicros: 1 }],
      ['POST', `/api/v1/workspaces/${ws}/close`, {}],
      ['POST', '/api/v1/tokens', { name: 'csrf' }],
      ['DELETE', '/api/v1/tokens/token_x', undefined],
      ['POST', '/api/v1/repository-rules', { list: 'allow', rule: 'https://example.com/x.git' }],
      ['DELETE', '/api/v1/repository-rules', { rule: 'https://example.com/x.git' }],
      ['POST', '/api/v1/ca-certificates', { pem: 'x' }],
      ['DELETE', '/api/v1/ca-certificates', { path: '/etc/passwd' }],
      ['POST', '/api/v1/repository-credentials', { kind: 'token', prefix: 'https://example.com/', token: 't' }],
      ['POST', '/api/v1/environments', { name: 'csrf' }],
      ['PUT', '/api/v1/environments/global/entries/X', { value: 'v' }],
      ['DELETE', '/api/v1/environments/global/entries/DASH_SECRET', undefined],
      ['POST', '/logout', undefined],
    ];
    for (const [method, path, body] of paths) {
      for (const h of [{}, { 'x-csrf-token': 'wrong-' + csrf }]) {
        const r = await httpRequest(svc.url, method, path, { cookie, ...h, ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, body === undefined ? undefined : JSON.stringify(body));
        expect(r.status, `${method} ${path}`).toBe(403);
        expect(JSON.parse(r.body).error.code).toBe('PERMISSION_DENIED');
      }
    }
    // Nothing changed: the workspace is open, the profile is active, the secret is there.
    expect(JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/workspaces', { cookie })).body).workspaces.map((w: { workspaceId: string }) => w.workspaceId)).toContain(ws);
    const entries = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/environments/global/entries', { cookie })).body).entries;
    expect(entries.map((e: { name: string }) => e.name)).toContain('DASH_SECRET');
  });

  it('refuses hostile input on the new paths and serves no file outside the built assets', async () => {
    const { cookie, csrf } = await sessionOf(ctx);
    const j = (method: string, path: string, body: unknown) => httpRequest(svc.url, method, path, { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' }, JSON.stringify(body));
    expect((await j('POST', '/api/v1/tokens', { name: 'x'.repeat(81) })).status).toBe(400);
    expect((await j('POST', '/api/v1/tokens', { name: '<script>' })).status).toBe(400);
    expect((await j('POST', '/api/v1/tokens', [1, 2])).status).toBe(400);
    expect((await j('DELETE', '/api/v1/tokens/nope', {})).status).toBe(404);
    expect((await j('POST', '/api/v1/repository-rules', { list: 'maybe', rule: 'https://a.example/x' })).status).toBe(400);
    expect((await j('POST', '/api/v1/repository-rules', { list: 'allow', rule: 'https://a.example/' + 'a/'.repeat(5000) })).status).toBe(400);
    expect((await j('DELETE', '/api/v1/repository-rules', { rule: 'https://never.example/x' })).status).toBe(404);
    expect((await j('DELETE', '/api/v1/ca-certificates', { path: '/etc/passwd' })).status).toBe(404);
    expect((await j('POST', '/api/v1/ca-certificates', { pem: 'A'.repeat(70_000) })).status).toBe(400);
    let deep: unknown = {};
    for (let i = 0; i < 2000; i++) deep = { a: deep };
    expect((await j('POST', '/api/v1/ca-certificates', { pem: deep })).status).toBe(400);
    expect((await httpRequest(svc.url, 'GET', '/api/v1/spend-series?range=decade', { cookie })).status).toBe(400);
    expect((await httpRequest(svc.url, 'GET', '/api/v1/workspaces?limit=0', { cookie })).status).toBe(400);
    expect((await httpRequest(svc.url, 'GET', '/api/v1/workspaces?cursor=forged', { cookie })).status).toBe(400);
    expect((await httpRequest(svc.url, 'GET', '/api/v1/agent-model-profiles/..%2F..%2Fetc/revisions', { cookie })).status).toBe(404);
    for (const p of ['/assets/..%2F..%2Fpackage.json', '/assets/../app.ts', '/assets/%2e%2e/atelier.db', '/assets/app.js.map%00.js']) {
      const r = await httpRequest(svc.url, 'GET', p);
      expect(r.status, p).toBe(404);
      expect(r.body).not.toContain('"dependencies"');
    }
    const js = await httpRequest(svc.url, 'GET', '/assets/app.js');
    expect(js.status).toBe(200);
    expect(js.headers['content-type']).toMatch(/javascript/);
    // Without a session nothing of the API answers, and the page is the login form.
    expect((await httpRequest(svc.url, 'GET', '/api/v1/overview')).status).toBe(401);
    expect((await httpRequest(svc.url, 'GET', '/')).body).toContain('name="password"');
  });

  it('every page renders without CSP violations; screenshots at laptop and phone widths', async () => {
    // Something for every page to show: a pending privileged command, a second profile drafted over
    // MCP (a revision awaiting activation, one escalation refused), spend by two more agents.
    const pend = await call(mcp, 'exec_run', { workspaceId: ws, command: 'apt-get install -y --no-install-recommends jq && jq --version', privileged: true });
    expect(pend.ok).toBe(false);
    const credentialId = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/provider-credentials', { cookie: (await sessionOf(ctx)).cookie })).body).credentials[0].id;
    const rv = await call(mcp, 'model_profile_create', { profileId: 'reviewer', displayName: 'Code reviewer', credentialId, model: 'model-r', apiMode: 'chat-completions', pricing: PRICING, limits: LIMITS, maxProxyOperations: ['files_read'], idempotencyKey: 'dash-rev-1' });
    expect(rv.ok).toBe(true);
    const rv2 = await call(mcp, 'model_profile_update', { profileId: 'reviewer', expectedGeneration: 1, displayName: 'Code reviewer (small)', limits: { ...LIMITS, maxOutputTokens: 4_000 }, idempotencyKey: 'dash-rev-2' });
    expect(rv2.ok).toBe(true);
    const rv3 = await call(mcp, 'model_profile_update', { profileId: 'reviewer', expectedGeneration: 2, maxProxyOperations: ['files_read', 'exec_run'], idempotencyKey: 'dash-rev-3' });
    expect(!rv3.ok && rv3.error.code).toBe('OWNER_APPROVAL_REQUIRED');
    // Input within what the request's bytes can carry (more would be a provider overrun that ends the lease).
    fake.usage = { input: 150, cached: 40, output: 2_500, reasoning: 300 };
    for (const [agent, n] of [['agent_' + 'p'.repeat(22), 3], ['agent_' + 'q'.repeat(22), 2]] as const) {
      const chat = await gatewayLease(agent, 'drafted', 1);
      for (let i = 0; i < n; i++) expect((await chat({ model: 'x', messages: [{ role: 'user', content: 'work' }] })).status).toBe(200);
    }
    const state = await ctx.storageState();
    for (const [label, w, h] of [['laptop', 1366, 900], ['phone', 390, 844]] as const) {
      const c = await browser.newContext({ viewport: { width: w, height: h }, deviceScaleFactor: label === 'phone' ? 2 : 1, storageState: state });
      const p = watch(await c.newPage());
      for (const id of PAGES) {
        await go(p, id);
        if (id === 'spend') await p.waitForSelector('.chart .uplot');
        await p.waitForTimeout(150);
        const file = join(ARTIFACTS, `${id}-${label}.png`);
        await p.screenshot({ path: file, fullPage: true });
        // No page is wider than the screen (phone: nothing to scroll sideways but tables in their own box).
        const overflow = await p.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
        expect(overflow, `${id} at ${label} width scrolls sideways`).toBeLessThanOrEqual(0);
      }
      await c.close();
    }
    expect(cspViolations).toEqual([]);
    expect(readdirSync(ARTIFACTS).filter((f) => f.endsWith('.png')).length).toBeGreaterThanOrEqual(PAGES.length * 2);
    // Last: the workspace is closed from its page.
    await go(page, 'workspaces');
    page.once('dialog', (d) => void d.accept());
    await page.locator('tr', { hasText: ws }).locator('button:has-text("Close")').click();
    await page.waitForSelector('text=No open workspaces.');
    const st = await call(mcp, 'workspace_status', { workspaceId: ws });
    expect(st.ok ? st.result.state : st.error.code).toMatch(/closed|NOT_FOUND|FAILED_PRECONDITION/);
    if (process.env.ATELIER_UPDATE_DOC_SCREENSHOTS === '1') {
      mkdirSync(DOCS_SHOTS, { recursive: true });
      for (const f of ['overview-laptop', 'approvals-laptop', 'profiles-laptop', 'spend-laptop', 'mcp-laptop', 'overview-phone', 'spend-phone']) copyFileSync(join(ARTIFACTS, `${f}.png`), join(DOCS_SHOTS, `${f}.png`));
    }
  }, 240_000);
});
