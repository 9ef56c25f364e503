/**
 * The operator's page and scheduled backups (issue #35 items 2 and 6; docs/operations.md,
 * docs/dashboard.md) through the real `atelier serve`: with --backup-dir the service takes a
 * backup at start (none was taken yet) and keeps the newest --backup-keep scheduled backups,
 * touching nothing else in the directory (not a symbolic link, not a directory of another name).
 * The dashboard's overview in chromium shows the version and schema, uptime, the last backup's time
 * and size, the calls and errors of the last hour with the slowest tools, the disk used by
 * workspaces, artifacts and releases, and a warning when the artifact quota is nearly full.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser } from 'playwright-core';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, dashboardLogin, httpRequest, serveExpectingFailure, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import { until } from './gateway-harness.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;
let browser: Browser;
let backupDir: string;
let outside: string;
const OLD = ['atelier-backup-20200101T000000Z', 'atelier-backup-20200102T000000Z', 'atelier-backup-20200103T000000Z'];

beforeAll(async () => {
  host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/operator', REPO_FILES)).url;
  backupDir = mkdtempSync(join(tmpdir(), 'atelier-sched-'));
  outside = mkdtempSync(join(tmpdir(), 'atelier-outside-'));
  writeFileSync(join(outside, 'precious.txt'), 'not a backup');
  // Three older scheduled backups, a directory of another name and a symbolic link named like a backup.
  for (const n of OLD) {
    mkdirSync(join(backupDir, n));
    writeFileSync(join(backupDir, n, 'manifest.json'), '{}');
  }
  mkdirSync(join(backupDir, 'keep-me'));
  symlinkSync(outside, join(backupDir, 'atelier-backup-20190101T000000Z'));
  svc = await startWorkspaceService(host, {
    config: { knowledgeEmbeddings: 'off', sandboxDiskMb: 0, artifactQuotaMb: 1, backupDir, backupKeep: 2, backupIntervalMinutes: 60 },
  });
  c = await connectV2(svc);
  const w = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'operator-open-1' });
  if (!w.ok) throw new Error(w.text);
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}, 180_000);

afterAll(async () => {
  await c?.close().catch(() => undefined);
  await browser?.close();
  await svc?.dispose();
  await host?.close();
  rmSync(backupDir, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

describe('scheduled backups', () => {
  it('one is taken at start; the newest --backup-keep scheduled backups stay, nothing else is touched', async () => {
    const made = await until(() => readdirSync(backupDir).find((n) => /^atelier-backup-\d{8}T\d{6}Z$/.test(n) && !OLD.includes(n) && existsSync(join(backupDir, n, 'manifest.json'))), 60_000);
    // Retention runs right after the backup's row is written.
    await until(() => !existsSync(join(backupDir, OLD[1]!)), 20_000);
    expect(readdirSync(backupDir).sort()).toEqual(['atelier-backup-20190101T000000Z', OLD[2]!, made, 'keep-me'].sort());
    expect(readFileSync(join(outside, 'precious.txt'), 'utf8')).toBe('not a backup');
    const m = JSON.parse(readFileSync(join(backupDir, made, 'manifest.json'), 'utf8'));
    expect(m).toMatchObject({ format: 'atelier-backup', masterKey: { included: false } });
    expect(existsSync(join(backupDir, made, 'master.key'))).toBe(false);
  }, 90_000);

  it('--backup-dir inside the data directory (or holding it) stops start-up, naming the setting', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'atelier-bdir-'));
    try {
      for (const bad of [join(dir, 'backups'), dir, tmpdir()]) {
        const r = await serveExpectingFailure(['--port', '0', '--data-dir', dir, '--unsafe-dev-no-sandbox', '--backup-dir', bad]);
        expect(r.code).toBe(2);
        expect(r.stderr).toMatch(/invalid setting --backup-dir \/ ATELIER_BACKUP_DIR: must be outside the data directory/);
      }
      const rel = await serveExpectingFailure(['--port', '0', '--data-dir', dir, '--unsafe-dev-no-sandbox', '--backup-dir', 'relative/dir']);
      expect(rel.stderr).toMatch(/--backup-dir.*an absolute path/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe("the operator's page", () => {
  it('shows version and schema, uptime, the last backup, calls and errors of the last hour, the slowest tools, disk use and a warning near a limit', async () => {
    // Calls: a slow one, a few quick ones, two that fail; an artifact of most of the 1 MiB quota.
    expect((await call(c, 'exec_run', { command: 'sleep 1.2; head -c 900000 /dev/urandom > big.bin' })).ok).toBe(true);
    for (let i = 0; i < 3; i++) expect((await call(c, 'files_read', { path: 'README.md' })).ok).toBe(true);
    for (let i = 0; i < 2; i++) expect((await call(c, 'files_read', { path: 'no-such-file.txt' })).ok).toBe(false);
    expect((await call(c, 'artifacts_snapshot', { path: 'big.bin', logicalName: 'big.bin' })).ok).toBe(true);
    // Behind the owner's session only.
    expect((await httpRequest(svc.url, 'GET', '/api/v1/instance')).status).toBe(401);
    expect((await httpRequest(svc.url, 'GET', '/api/v1/instance', { authorization: `Bearer ${svc.token}` })).status).toBe(401);
    const owner = await dashboardLogin(svc);
    const inst = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/instance', { cookie: owner.cookie })).body);
    const health = JSON.parse((await httpRequest(svc.url, 'GET', '/healthz')).body);
    expect(inst).toMatchObject({ version: health.version, schema: health.schema, backups: { last: { kind: 'scheduled', outcome: 'ok' }, schedule: { dir: backupDir, keep: 2, intervalMinutes: 60 } } });
    expect(inst.calls.errors).toBe(2);
    expect(inst.calls.calls).toBeGreaterThanOrEqual(7);
    // The slowest tools (the workspace open and the 1.2 s command; which of them is first depends on the machine).
    expect(inst.calls.slowest.map((t: { tool: string }) => t.tool)).toEqual(expect.arrayContaining(['workspace_open', 'exec_run']));
    expect(inst.calls.slowest.find((t: { tool: string }) => t.tool === 'exec_run').meanMs).toBeGreaterThanOrEqual(1200);
    expect(inst.disk.artifacts.bytes).toBe(900000);
    expect(inst.disk.workspaces.count).toBe(1);
    expect(inst.disk.workspaces.bytes).toBeGreaterThan(900000);
    expect(inst.warnings.join('\n')).toMatch(/artifacts use 1 MiB of their 1 MiB quota/);
    // In chromium, on the overview (a fresh login link: the one printed at start was spent above).
    const link = await import('./harness.js').then((h) => h.runCli(['owner', 'login-link', '--json', '--data-dir', svc.dataDir]));
    const ctx = await browser.newContext({ viewport: { width: 1366, height: 900 } });
    const page = await ctx.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(svc.url + JSON.parse(link.stdout).path);
    await page.waitForSelector('main.content[data-page="overview"]');
    await page.waitForSelector('#instance [data-testid="instance-version"]');
    const text = (id: string) => page.locator(`[data-testid="${id}"]`).innerText();
    expect(await text('instance-version')).toBe(`${health.version} · schema ${health.schema}`);
    expect(await text('instance-uptime')).toMatch(/^\d+[hm] \d+[ms]/);
    const last = inst.backups.last;
    const sizeText = last.bytes < 1_048_576 ? /\d+(\.\d)? KiB/ : /\d+(\.\d)? MiB/;
    expect(await text('instance-backup')).toMatch(new RegExp(`${last.finishedAt.slice(0, 16).replace('T', ' ')} UTC .* · ${sizeText.source} \\(scheduled, ${backupDir}/atelier-backup-\\d{8}T\\d{6}Z\\)`));
    expect(await text('instance-backup')).toMatch(/scheduled every 60 min .* keeping 2/);
    expect(await text('instance-calls')).toMatch(/^\d+ calls · 2 errors$/);
    expect(await text('instance-slowest')).toMatch(/(^|\n)exec_run mean \d{4,} ms, max \d{4,} ms \(1 calls\)/);
    expect(await text('instance-disk')).toMatch(/workspaces \d+(\.\d)? [KMG]iB \(1\) · artifacts 879 KiB of 1\.0 MiB · releases 0 B \(0\)/);
    expect(await text('instance-warnings')).toMatch(/artifacts use 1 MiB of their 1 MiB quota/);
    expect(errors).toEqual([]);
    await ctx.close();
  }, 120_000);
});
