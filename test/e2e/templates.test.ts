/**
 * Setup that runs once (issue #33 item 3, docs/templates.md), through the real service: an
 * environment's setup script runs at the first open (dependency-access, a real `npm install` from
 * a verdaccio registry on loopback, its output as the open's progress, a setup-only secret in its
 * environment), the result is kept as a template, later opens start from it and run only the
 * maintenance script; the setup-only secret is in no file of the template (its raw image included)
 * and not in the later workspace's environment; a new commit builds a new template; a failing
 * setup, and one that leaves the secret in a file, keep nothing and say why (in the open's error
 * and on the dashboard, in a real browser).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { chromium, type Browser } from 'playwright-core';
import { call, connectV2, dashboardLogin, httpRequest, runCli, type Service } from './harness.js';
import { configFor, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import { startRegistry, type Registry } from '../fixtures/verdaccio.js';
import { leftoversOf } from './leftovers.js';

type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const SETUP_SECRET = 'setup-only-tok-9c1e5a7f3b2d4e6a';
const PASSWORD = 'correct horse battery staple';

let host: GitHost;
let registry: Registry;
let svc: Service;
let c: Client;
let repoUrl: string;
let bareDir: string;
let browser: Browser | undefined;
const dataDir = mkdtempSync(join(tmpdir(), 'atelier-tpl-'));

async function ok(name: string, args: Record<string, unknown>): Promise<R> {
  const r = await call(c, name, args, 300_000);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result as R;
}
/** workspace_open with its progress messages. */
async function openWithProgress(args: Record<string, unknown>): Promise<{ ok: boolean; result: R; messages: string[]; text: string }> {
  const messages: string[] = [];
  const r = (await c.callTool({ name: 'workspace_open', arguments: args }, { onprogress: (p) => void (p.message && messages.push(p.message)), timeout: 600_000, resetTimeoutOnProgress: true })) as R;
  const result = (r.structuredContent ?? JSON.parse(r.content[0].text)) as R;
  return { ok: !r.isError, result: r.isError ? result.error : result, messages, text: r.content.map((x: R) => x.text ?? '').join('') };
}
const sh = async (workspaceId: string, command: string) => (await ok('exec_run', { workspaceId, command, timeoutMs: 60_000 })) as { stdout: string; stderr: string; exitCode: number };
const cli = async (args: string[], input?: string) => {
  const r = await runCli([...args, '--data-dir', dataDir], input === undefined ? {} : { input });
  expect(r.code, r.stderr).toBe(0);
  return r.stdout;
};
const envIds: Record<string, string> = {};
let session: { cookie: string; csrf: string } | undefined;
/** The dashboard session (the one-time login link works once). */
const login = async () => (session ??= await dashboardLogin(svc));
const createEnv = async (name: string) => (envIds[name] = (await cli(['env', 'create', name])).split(/\s+/)[0]!);
/** The templates' folder: in the image pool when there is one (docs/checkpoints.md), else in the data directory. */
const templatesDir = () => join(existsSync(join(dataDir, 'image-pool.xfs')) ? join(dataDir, 'image-pool') : dataDir, 'templates');
const templateImages = () => (existsSync(templatesDir()) ? readdirSync(templatesDir()) : []);

/** The repository: a small project with a dependency from the registry, and an .npmrc that reads the registry's address from the environment. */
function projectFiles(): Record<string, string> {
  return {
    'package.json': JSON.stringify({ name: 'tpl-app', version: '1.0.0', private: true, dependencies: { 'tpl-dep': '1.0.0' } }, null, 2),
    'index.js': "console.log(require('tpl-dep'));\n",
    'README.md': '# template demo\n',
  };
}

const SETUP = [
  'set -eo pipefail',
  'echo "setup starting"',
  'test -n "$SETUP_TOKEN" && echo "token present: $SETUP_TOKEN"',
  'npm install --no-audit --no-fund --no-update-notifier 2>&1 | tail -n 3',
  // dependency-access: the configured registry only; anything else is refused by the proxy.
  'curl -s -m 10 -o /dev/null -w "egress-check %{http_code}\\n" https://example.com/ || echo "egress-check failed"',
  // Proof the value was there, without keeping it: its hash.
  'printf %s "$SETUP_TOKEN" | sha256sum | cut -c1-16 > .setup-proof',
  // A file holding the value, deleted before the end: neither the tree nor the image may keep it.
  'printf %s "$SETUP_TOKEN" > /tmp/scratch-token; rm /tmp/scratch-token',
  'date +%s%N > .setup-ran',
  'echo "setup done"',
].join('\n');
const MAINTENANCE = 'echo "maintenance token=${SETUP_TOKEN:-absent}"; echo ran >> .maintenance-log';

beforeAll(async () => {
  host = await startGitHost();
  const repo = await host.createRepo('approved/tpl-app', projectFiles());
  repoUrl = repo.url;
  bareDir = repo.bareDir;
  registry = await startRegistry();
  await registry.publish({ name: 'tpl-dep', version: '1.0.0', files: { 'index.js': "module.exports = 'tpl-dep works';\n" } });
  const port = Number(new URL(registry.url).port);
  const config = { egress: { allow: [{ host: '127.0.0.1', ports: [port], allowPrivate: true }] }, sandboxDiskMb: 256 };
  await configFor(host, dataDir, config);
  await runCli(['owner', 'set-password', '--data-dir', dataDir], { input: PASSWORD + '\n' });
  await createEnv('node-env');
  await cli(['env', 'set', 'node-env', `npm_config_registry=${registry.url}`]);
  await cli(['env', 'set', 'node-env', 'npm_config_ca'], readFileSync(registry.caCertPath, 'utf8'));
  // The registry listens on the host's loopback: through the proxy, not the sandbox's own loopback (NO_PROXY's default).
  await cli(['env', 'set', 'node-env', 'NO_PROXY=']);
  await cli(['env', 'set', 'node-env', 'no_proxy=']);
  await cli(['env', 'set', 'node-env', 'SETUP_TOKEN', '--secret', '--setup-only', '--description', 'only for setup'], SETUP_SECRET + '\n');
  await cli(['env', 'script', 'node-env', 'setup'], SETUP);
  await cli(['env', 'script', 'node-env', 'maintenance'], MAINTENANCE);
  svc = await startWorkspaceService(host, { dataDir, config });
  c = await connectV2(svc);
}, 240_000);

afterAll(async () => {
  await browser?.close();
  await c?.close();
  await svc?.dispose();
  expect(leftoversOf(dataDir)).toEqual([]);
  await registry?.close();
  await host?.close();
});

let first: R;
let firstWs: string;

describe('setup that runs once', () => {
  it('the first open runs the setup script (dependency-access, setup-only secret, output as progress) and keeps a template', async () => {
    const o = await openWithProgress({ repositoryUrl: repoUrl, idempotencyKey: 'template-1', environmentId: envIds['node-env'], confirmEnvironmentInjection: true });
    expect(o.ok, o.text).toBe(true);
    first = o.result;
    firstWs = first.workspaceId;
    expect(first.template).toMatchObject({ built: true, maintenance: null, startedBy: expect.stringMatching(/^(reflink|sparse-copy)$/) });
    expect(first.template.templateId).toMatch(/^tpl_/);
    expect(first.template.baseOid).toBe(first.headOid);
    expect(first.template.sizeBytes).toBeGreaterThan(0);
    // The setup's output streamed as progress, the secret redacted from it.
    expect(o.messages).toContain('setup: setup starting');
    expect(o.messages).toContain('setup: token present: [redacted:SETUP_TOKEN]');
    expect(o.messages).toContain('setup: setup done');
    expect(o.messages.find((m) => m.startsWith('setup: egress-check'))).toMatch(/^setup: egress-check (000|403|failed)$/);
    expect(o.messages.join('\n')).not.toContain(SETUP_SECRET);
    // The dependency is installed; the secret was there during setup; it is not in the workspace's environment.
    expect((await sh(firstWs, 'node index.js')).stdout.trim()).toBe('tpl-dep works');
    const proof = execFileSync('sh', ['-c', `printf %s '${SETUP_SECRET}' | sha256sum | cut -c1-16`], { encoding: 'utf8' }).trim();
    expect((await sh(firstWs, 'cat .setup-proof')).stdout.trim()).toBe(proof);
    expect((await sh(firstWs, 'echo "[${SETUP_TOKEN:-absent}]"; env | grep -c SETUP_TOKEN || true')).stdout.trim()).toBe('[absent]\n0');
    expect((await sh(firstWs, 'test -e .maintenance-log && echo yes || echo no')).stdout.trim()).toBe('no');
    // The workspace itself is as opened (network-none): the registry the setup reached is not reachable from it.
    const port = new URL(registry.url).port;
    expect((await sh(firstWs, `curl -sk -m 5 -o /dev/null -w "%{http_code}" https://127.0.0.1:${port}/tpl-dep || true`)).stdout.trim()).toBe('000');
    // No file the workspace can read holds the value (nor its name), nor the raw template image.
    const found = await sh(firstWs, `grep -rlsF -e '${SETUP_SECRET}' /workspace "$HOME" /tmp | head; echo end`);
    expect(found.stdout.trim()).toBe('end');
    const img = join(templatesDir(), `${first.template.templateId}.img`);
    expect(existsSync(img)).toBe(true);
    expect(readFileSync(img).includes(Buffer.from(SETUP_SECRET))).toBe(false);
  }, 600_000);

  it('a later open starts from the template and runs only the maintenance script', async () => {
    const o = await openWithProgress({ repositoryUrl: repoUrl, idempotencyKey: 'template-2', environmentId: envIds['node-env'], confirmEnvironmentInjection: true });
    expect(o.ok, o.text).toBe(true);
    const w = o.result;
    expect(w.template).toMatchObject({ templateId: first.template.templateId, built: false, baseOid: first.headOid, maintenance: { exitCode: 0 } });
    // With the image pool (mkfs.xfs installed, as scripts/setup.sh does) a template start is a reflink clone.
    expect(w.template.startedBy).toBe(existsSync(join(dataDir, 'image-pool.xfs')) ? 'reflink' : 'sparse-copy');
    if (existsSync('/usr/sbin/mkfs.xfs')) expect(existsSync(join(dataDir, 'image-pool.xfs'))).toBe(true);
    expect(o.messages.some((m) => m.startsWith('setup: setup'))).toBe(false);
    expect(o.messages).toContain('maintenance: maintenance token=absent');
    // The setup did not run again: its timestamp is the first open's.
    expect((await sh(w.workspaceId, 'cat .setup-ran')).stdout).toBe((await sh(firstWs, 'cat .setup-ran')).stdout);
    expect((await sh(w.workspaceId, 'cat .maintenance-log; node index.js')).stdout.trim()).toBe('ran\ntpl-dep works');
    // Nothing is shared: a change in one workspace is not in the other.
    await sh(w.workspaceId, 'echo mine > only-here.txt');
    expect((await sh(firstWs, 'test -e only-here.txt && echo shared || echo separate')).stdout.trim()).toBe('separate');
    await ok('workspace_close', { workspaceId: w.workspaceId });
  }, 600_000);

  it('concurrent first opens of one key share one setup', async () => {
    await createEnv('par-env');
    await cli(['env', 'script', 'par-env', 'setup'], 'date +%s%N > .setup-ran; sleep 1');
    const [a, b] = await Promise.all([
      openWithProgress({ repositoryUrl: repoUrl, idempotencyKey: 'template-par-a', environmentId: envIds['par-env'], confirmEnvironmentInjection: true }),
      openWithProgress({ repositoryUrl: repoUrl, idempotencyKey: 'template-par-b', environmentId: envIds['par-env'], confirmEnvironmentInjection: true }),
    ]);
    expect(a.ok, a.text).toBe(true);
    expect(b.ok, b.text).toBe(true);
    expect(a.result.template.templateId).toBe(b.result.template.templateId);
    expect((await sh(a.result.workspaceId, 'cat .setup-ran')).stdout).toBe((await sh(b.result.workspaceId, 'cat .setup-ran')).stdout);
    const listed = (await cli(['env', 'templates'])).split('\n').filter((l) => l.includes('par-env'));
    expect(listed).toHaveLength(1);
    await ok('workspace_close', { workspaceId: a.result.workspaceId });
    await ok('workspace_close', { workspaceId: b.result.workspaceId });
  }, 600_000);

  it('a new commit on the branch builds a new template for it', async () => {
    const wd = mkdtempSync(join(tmpdir(), 'tpl-push-'));
    try {
      execFileSync('git', ['clone', '-q', bareDir, wd]);
      writeFileSync(join(wd, 'CHANGELOG.md'), 'a change\n');
      execFileSync('sh', ['-c', 'git add -A && git -c user.name=T -c user.email=t@example.invalid commit -qm change && git push -q origin HEAD'], { cwd: wd });
    } finally {
      rmSync(wd, { recursive: true, force: true });
    }
    const o = await openWithProgress({ repositoryUrl: repoUrl, idempotencyKey: 'template-3', environmentId: envIds['node-env'], confirmEnvironmentInjection: true });
    expect(o.ok, o.text).toBe(true);
    expect(o.result.template.built).toBe(true);
    expect(o.result.template.templateId).not.toBe(first.template.templateId);
    expect(o.result.headOid).not.toBe(first.headOid);
    expect(o.result.template.baseOid).toBe(o.result.headOid);
    expect((await sh(o.result.workspaceId, 'cat CHANGELOG.md; node index.js')).stdout.trim()).toBe('a change\ntpl-dep works');
    await ok('workspace_close', { workspaceId: o.result.workspaceId });
  }, 600_000);
});

describe('setups that fail keep nothing and say why', () => {
  it('a failing setup script: the open fails with its exit and output; no template, no workspace', async () => {
    await createEnv('bad-env');
    await cli(['env', 'script', 'bad-env', 'setup'], 'echo "installing"; echo "npm ERR! could not resolve nothing-here" >&2; exit 3');
    const before = templateImages();
    const listedBefore = ((await ok('workspace_list', {})).workspaces as R[]).length;
    const o = await openWithProgress({ repositoryUrl: repoUrl, idempotencyKey: 'template-bad', environmentId: envIds['bad-env'], confirmEnvironmentInjection: true });
    expect(o.ok).toBe(false);
    expect(o.result.code).toBe('FAILED_PRECONDITION');
    expect(o.result.message).toContain('exited with 3');
    expect(o.result.message).toContain('npm ERR! could not resolve nothing-here');
    expect(o.result.message).toContain('no template was kept');
    expect(o.result.details).toMatchObject({ step: 'setup script', exitCode: 3, templateId: expect.stringMatching(/^tpl_/) });
    expect(o.messages).toContain('setup: installing');
    expect(templateImages()).toEqual(before);
    expect(((await ok('workspace_list', {})).workspaces as R[]).length).toBe(listedBefore);
    // Nothing of the build left: no image, no mount, no build directory.
    const id = o.result.details.templateId as string;
    expect(existsSync(join(dataDir, 'disks', `${id}.img`))).toBe(false);
    expect(existsSync(join(dataDir, 'image-pool', 'disks', `${id}.img`))).toBe(false);
    expect(existsSync(join(dataDir, 'workspaces', id))).toBe(false);
    expect(readFileSync('/proc/mounts', 'utf8')).not.toContain(id);
    const listed = (await cli(['env', 'templates'])).split('\n').find((l) => l.startsWith(id))!;
    expect(listed).toContain('failed');
    expect(listed).toContain('exited with 3');
  }, 600_000);

  it('a setup that leaves a setup-only value in a file is refused, naming the entry and the file', async () => {
    await createEnv('leaky-env');
    await cli(['env', 'set', 'leaky-env', 'LEAKY_TOKEN', '--secret', '--setup-only'], 'leaky-value-' + 'x'.repeat(20) + '\n');
    // Hidden: deep, mode 000, and behind a symlink pointing out of the tree (followed by nothing).
    await cli(['env', 'script', 'leaky-env', 'setup'], 'mkdir -p .cache/a/b && printf "token=%s\\n" "$LEAKY_TOKEN" > .cache/a/b/npmrc && chmod 000 .cache/a/b/npmrc && ln -s /etc/shadow .cache/link');
    const before = templateImages();
    const o = await openWithProgress({ repositoryUrl: repoUrl, idempotencyKey: 'template-leaky', environmentId: envIds['leaky-env'], confirmEnvironmentInjection: true });
    expect(o.ok).toBe(false);
    expect(o.result.code).toBe('FAILED_PRECONDITION');
    expect(o.result.details).toMatchObject({ step: 'secret check', name: 'LEAKY_TOKEN', path: 'repo/.cache/a/b/npmrc' });
    expect(o.result.message).toContain('setup-only LEAKY_TOKEN');
    expect(o.text).not.toContain('leaky-value-');
    expect(templateImages()).toEqual(before);
  }, 600_000);
});

describe('the dashboard lists templates with state and size', () => {
  it('the scripts and setup-only REST refuse bad input naming the field, need the CSRF token, and change nothing then', async () => {
    const s = await login();
    const h = { cookie: s.cookie, 'x-csrf-token': s.csrf, 'content-type': 'application/json' };
    const env = envIds['node-env']!;
    const put = (path: string, body: unknown, headers: Record<string, string> = h) => httpRequest(svc.url, 'PUT', `/api/v1${path}`, headers, JSON.stringify(body));
    const field = async (r: Promise<{ status: number; body: string }>) => {
      const x = await r;
      expect(x.status).toBe(400);
      return JSON.parse(x.body).error.details.field as string;
    };
    expect((await put(`/environments/${env}/scripts`, { setupScript: 'echo changed' }, { cookie: s.cookie, 'content-type': 'application/json' })).status).toBe(403);
    expect(await field(put(`/environments/${env}/scripts`, { setupScript: 42 }))).toBe('setupScript');
    expect(await field(put(`/environments/${env}/scripts`, { maintenanceScript: '   ' }))).toBe('maintenanceScript');
    expect(await field(put(`/environments/${env}/scripts`, { setupScript: 'x'.repeat(65537) }))).toBe('setupScript');
    expect(await field(put(`/environments/${env}/scripts`, { setupScript: 'ok\u0000' }))).toBe('setupScript');
    expect(await field(put(`/environments/${env}/scripts`, { prepare: 'echo' }))).toBe('prepare');
    expect(await field(put('/environments/global/scripts', { setupScript: 'echo' }))).toBe('environment');
    expect(await field(put('/environments/global/entries/GLOBAL_SETUP', { value: 'v', setupOnly: true }))).toBe('setupOnly');
    expect(await field(put(`/environments/${env}/entries/X_SETUP`, { value: 'v', setupOnly: 'yes' }))).toBe('setupOnly');
    const scripts = JSON.parse((await httpRequest(svc.url, 'GET', `/api/v1/environments/${env}/scripts`, { cookie: s.cookie })).body);
    expect(scripts).toEqual({ environmentId: env, setupScript: SETUP, maintenanceScript: MAINTENANCE });
    const entries = JSON.parse((await httpRequest(svc.url, 'GET', `/api/v1/environments/${env}/entries`, { cookie: s.cookie })).body).entries as R[];
    expect(entries.find((e) => e.name === 'SETUP_TOKEN')).toMatchObject({ kind: 'secret', setupOnly: true });
    expect(entries.some((e) => e.name === 'X_SETUP')).toBe(false);
    expect(JSON.stringify(entries)).not.toContain(SETUP_SECRET);
    expect((await httpRequest(svc.url, 'DELETE', '/api/v1/templates/tpl_nonexistent00000000000', { cookie: s.cookie, 'x-csrf-token': s.csrf })).status).toBe(404);
  }, 120_000);

  it('shows ready and failed templates, their size and why one failed (chromium)', async () => {
    const s = await login();
    const rest = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/templates', { cookie: s.cookie })).body).templates as R[];
    const ready = rest.find((t) => t.templateId === first.template.templateId)!;
    expect(ready).toMatchObject({ state: 'ready', environmentName: 'node-env', baseOid: first.headOid });
    expect(ready.sizeBytes).toBeGreaterThan(0);
    expect(rest.some((t) => t.state === 'failed' && /exited with 3/.test(t.failure))).toBe(true);
    expect(JSON.stringify(rest)).not.toContain(SETUP_SECRET);

    browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    const ctx = await browser.newContext();
    const page = await ctx.newPage();
    await page.goto(`${svc.url}/`);
    await page.fill('input[name=password]', PASSWORD);
    await page.click('button[type=submit]');
    await page.waitForSelector('main.content[data-page="overview"]');
    await page.goto(`${svc.url}/#/environments`);
    await page.waitForSelector(`[data-template="${first.template.templateId}"]`);
    const row = page.locator(`[data-template="${first.template.templateId}"]`);
    expect(await row.locator('.badge').first().textContent()).toBe('ready');
    expect(await row.textContent()).toMatch(/\d+(\.\d+)? MiB/);
    expect(await row.textContent()).toContain('node-env');
    const failed = page.locator('[data-template-state="failed"]', { hasText: 'exited with 3' });
    expect(await failed.count()).toBeGreaterThan(0);
    // The setup-only entry is marked as such; scripts are shown for the environment.
    await page.waitForSelector('text=setup-only');
    await ctx.close();
  }, 240_000);
});
