/**
 * Issue #44 item 6 through the real service: the operator's page lists each active workspace's
 * running language servers with their memory. A workspace with a small TypeScript file; code_hover
 * starts typescript-language-server; GET /api/v1/code-servers (owner session) then lists it running
 * with its pid and a resident memory above zero (its processes, read from /proc by the daemon), and
 * the Workspaces page in Debian's chromium shows it in "Language servers"; after the idle stop
 * (codeIntelIdleSeconds) both show it stopped with the reason. The endpoint is a status read: a
 * workspace whose servers never ran lists them stopped and reading it starts none; a workspace
 * whose daemon does not answer (stopped by SIGSTOP from the host) is listed with an error within the
 * 2 s bound while the others are shown.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, httpRequest, type Service } from './harness.js';
import { until } from './gateway-harness.js';
import { startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** Long enough that the page, loaded right after a call, still finds the server running under load. */
const IDLE_SECONDS = 30;
let host: GitHost;
let svc: Service;
let c: Client;
let ws: string;
let idleWs: string;
let browser: Browser;
let ctx: BrowserContext;
let page: Page;
const pageErrors: string[] = [];

async function ok(name: string, args: Record<string, unknown>): Promise<R> {
  const r = await call(c, name, args, 120_000);
  if (!r.ok) throw new Error(`${name}: ${r.text}`);
  return r.result as R;
}

/** The endpoint through the browser's session (cookie from the login link). */
async function listed(): Promise<R> {
  const r = await ctx.request.get(`${svc.url}/api/v1/code-servers`);
  expect(r.status()).toBe(200);
  return (await r.json()) as R;
}

const tsOf = (body: R, id: string): R | undefined => body.workspaces.find((w: R) => w.workspaceId === id)?.servers.find((s: R) => s.server === 'typescript');

beforeAll(async () => {
  host = await startGitHost();
  const files = { 'tsconfig.json': '{"compilerOptions":{"strict":true}}', 'a.ts': 'export const answer: number = 42;\nexport function twice(n: number): number {\n  return n * 2;\n}\n' };
  const url = (await host.createRepo('approved/code-intel-dashboard', files)).url;
  const other = (await host.createRepo('approved/code-intel-dashboard-idle', files)).url;
  svc = await startWorkspaceService(host, { config: { sandboxMemoryMb: 1024, sandboxPidsMax: 512, knowledgeEmbeddings: 'off', codeIntelIdleSeconds: IDLE_SECONDS } });
  c = await connectV2(svc);
  ws = (await ok('workspace_open', { repositoryUrl: url, idempotencyKey: 'code-intel-dash-1' })).workspaceId as string;
  idleWs = (await ok('workspace_open', { repositoryUrl: other, idempotencyKey: 'code-intel-dash-2' })).workspaceId as string;
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
  ctx = await browser.newContext();
  page = await ctx.newPage();
  page.on('console', (m) => {
    if (/Content.Security.Policy|Refused to/i.test(m.text())) pageErrors.push(m.text());
  });
  page.on('pageerror', (e) => pageErrors.push(`page error: ${e.message}`));
  await page.goto(svc.loginLink);
  await page.waitForSelector('main.content[data-page="overview"]');
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('the operator sees language servers per workspace', { timeout: 240_000 }, () => {
  it('refuses the endpoint without a session', async () => {
    expect((await httpRequest(svc.url, 'GET', '/api/v1/code-servers')).status).toBe(401);
  });

  it('lists a running server with its memory, on the endpoint and the page; reading starts nothing', async () => {
    const hover = await ok('code_hover', { workspaceId: ws, path: 'a.ts', symbol: 'twice' });
    expect(hover.contents).toContain('twice');
    const body = await listed();
    const running = tsOf(body, ws)!;
    expect(running).toMatchObject({ state: 'running', restarts: 0 });
    expect(running.pid).toBeGreaterThan(0);
    // typescript-language-server and its tsserver hold tens of MB; more than 10 MB proves the children count or at least a real reading.
    expect(running.memoryBytes).toBeGreaterThan(10 * 1024 * 1024);
    expect(body.workspaces.find((w: R) => w.workspaceId === ws).memoryBytes).toBeGreaterThanOrEqual(running.memoryBytes);
    // The tool reports the same reading.
    const fromTool = (await ok('code_servers', { workspaceId: ws })).servers.find((s: R) => s.server === 'typescript');
    expect(fromTool.memoryBytes).toBeGreaterThan(10 * 1024 * 1024);
    // The other workspace's servers never ran: listed stopped, and listing (twice) started none.
    expect(tsOf(body, idleWs)).toMatchObject({ state: 'stopped', pid: null, memoryBytes: null });
    expect(tsOf(await listed(), idleWs)).toMatchObject({ state: 'stopped', pid: null });

    await ok('code_hover', { workspaceId: ws, path: 'a.ts', symbol: 'answer' }); // the idle time starts again: the page sees it running
    await page.goto(`${svc.url}/#/workspaces`);
    const row = page.locator(`[data-testid="code-servers-workspace"][data-workspace="${ws}"] [data-testid="code-server"][data-server="typescript"]`);
    await row.waitFor();
    expect(await row.getAttribute('data-state')).toBe('running');
    expect(await row.locator('[data-testid="code-server-memory"]').textContent()).toMatch(/^\d+(\.\d)? (MiB|GiB)$/);
    expect(await page.locator('#language-servers').textContent()).toContain('Language servers');
    expect(await page.locator(`[data-testid="code-servers-workspace"][data-workspace="${idleWs}"] [data-server="typescript"]`).getAttribute('data-state')).toBe('stopped');
  });

  it('shows the server stopped after the idle time, with the reason', async () => {
    const stopped = await until(async () => {
      const b = await listed();
      return tsOf(b, ws)?.state === 'stopped' ? b : undefined;
    }, (IDLE_SECONDS + 45) * 1000);
    expect(tsOf(stopped, ws)).toMatchObject({ state: 'stopped', pid: null, memoryBytes: null, lastExit: { expected: true, reason: `stopped after ${IDLE_SECONDS} s idle` } });
    // The page polls every 10 s; a reload shows it at once.
    await page.reload();
    const row = page.locator(`[data-testid="code-servers-workspace"][data-workspace="${ws}"] [data-testid="code-server"][data-server="typescript"]`);
    await page.waitForSelector(`[data-testid="code-servers-workspace"][data-workspace="${ws}"] [data-server="typescript"][data-state="stopped"]`);
    expect(await row.textContent()).toContain(`stopped after ${IDLE_SECONDS} s idle`);
    expect(pageErrors).toEqual([]);
  });

  it('lists a workspace whose daemon does not answer with an error, within its bound, and the others as before', async () => {
    const db = new Database(join(svc.dataDir, 'atelier.db'), { readonly: true, fileMustExist: true });
    const keeper = (JSON.parse((db.prepare('SELECT sandbox_json FROM workspaces WHERE id = ?').get(idleWs) as { sandbox_json: string }).sandbox_json) as { pid: number }).pid;
    db.close();
    const parentOf = (pid: number): number => Number(readFileSync(`/proc/${pid}/stat`, 'latin1').split(') ')[1]!.split(' ')[1]);
    const descends = (pid: number): boolean => {
      for (let p = pid, hops = 0; p > 1 && hops < 64; p = parentOf(p), hops++) if (p === keeper) return true;
      return false;
    };
    const daemon = readdirSync('/proc')
      .filter((n) => /^\d+$/.test(n))
      .map(Number)
      .find((pid) => {
        try {
          const argv = readFileSync(`/proc/${pid}/cmdline`, 'latin1').split('\0');
          return argv[0] === '/usr/bin/node' && argv.includes('/opt/atelier/daemon/main.js') && descends(pid);
        } catch {
          return false;
        }
      });
    expect(daemon).toBeGreaterThan(0);
    process.kill(daemon!, 'SIGSTOP');
    try {
      const t0 = Date.now();
      const body = await listed();
      expect(Date.now() - t0).toBeLessThan(15_000);
      const hung = body.workspaces.find((w: R) => w.workspaceId === idleWs);
      expect(hung).toMatchObject({ sandbox: 'unknown', servers: [], error: { code: 'DEADLINE_EXCEEDED' } });
      expect(hung.error.message).toContain('2000 ms');
      expect(tsOf(body, ws)).toMatchObject({ state: 'stopped' });
    } finally {
      process.kill(daemon!, 'SIGCONT');
    }
    // Once it answers again, so does its entry (the timeout did not give up on the sandbox).
    const back = await until(async () => {
      const b = await listed();
      return b.workspaces.find((w: R) => w.workspaceId === idleWs && !w.error) ? b : undefined;
    }, 30_000);
    expect(tsOf(back, idleWs)).toMatchObject({ state: 'stopped' });
  });
});
