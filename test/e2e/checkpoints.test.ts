/**
 * Workspace checkpoints and forks (issue #33 items 1 and 2) through the real `atelier serve` and
 * the MCP v2 client: a checkpoint and restore of a workspace holding symlinks (one to a root-owned
 * canary on the host), hard links, sparse and large files, executable bits and a dirty git index,
 * compared byte for byte (a manifest of every entry: kind, mode, links, inode, size, blocks, times,
 * link target, content hash); restore stops processes first; a fork taken while a command writes
 * is consistent; forks are isolated from each other and their source; quotas at their edges;
 * retention; /metrics; bad input.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync, chmodSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { chromium } from 'playwright-core';
import { call, connectV2, httpRequest, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;
let ws1: string;
let canary: string;
/** Where the service keeps its images: the XFS image pool (reflink copies) when mkfs.xfs is installed, as scripts/setup.sh does, else the data directory (full copies). */
let IMAGES: string;
let MODE: 'reflink' | 'copy';
const SECOND_MS = 20;
const MAX_COUNT = 4;
const QUOTA_MB = 400;
type R = Record<string, unknown>;

async function ok(name: string, args: R, timeoutMs = 300_000): Promise<R> {
  const r = await call(c, name, args, timeoutMs);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
async function fail(name: string, args: R): Promise<{ code: string; message: string; details: R }> {
  const r = await call(c, name, args, 300_000);
  if (r.ok) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(r.result).slice(0, 300)}`);
  return r.error;
}
async function sh(ws: string, command: string): Promise<string> {
  const r = await ok('exec_run', { workspaceId: ws, command, timeoutMs: 120_000, maxOutputBytes: 1_048_576 });
  if (r.exitCode !== 0) throw new Error(`${command}: ${JSON.stringify(r).slice(0, 800)}`);
  return String(r.stdout);
}
let keys = 0;
/** The fork test's writer (stopped there; and by the next test should that one have failed). */
let writerOp = '';
const key = () => `ckpt-test-${++keys}-${Date.now()}`;

/**
 * Every entry under /workspace, /home/user and /tmp/t: path, kind, mode, link count, inode, size,
 * allocated blocks, mtime, link target; then the content hash of every regular file. Inode numbers
 * and block counts are part of it: a restore gives back the filesystem itself, not a re-creation.
 */
const MANIFEST = `cd / && find workspace home/user tmp/t -xdev -printf '%p|%y|%m|%n|%i|%s|%b|%T@|%l\\n' | LC_ALL=C sort && find workspace home/user tmp/t -xdev -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum`;

beforeAll(async () => {
  host = await startGitHost();
  const a = (await host.createRepo('approved/ckpt-a', REPO_FILES)).url;
  svc = await startWorkspaceService(host, {
    config: { retentionSecondMs: SECOND_MS, knowledgeEmbeddings: 'off', sandboxDiskMb: 1024, sandboxMemoryMb: 512, checkpointMaxCount: MAX_COUNT, checkpointQuotaMb: QUOTA_MB },
  });
  // A root-owned directory on the host a workspace symlink points at: nothing may touch it.
  canary = join(svc.dataDir, '..', `ckpt-canary-${Date.now()}`);
  mkdirSync(canary, { mode: 0o700 });
  writeFileSync(join(canary, 'secret'), 'root only\n', { mode: 0o600 });
  chmodSync(canary, 0o700);
  const pooled = readFileSync('/proc/self/mountinfo', 'utf8').includes(` ${join(svc.dataDir, 'image-pool')} `);
  expect(pooled).toBe(existsSync('/usr/sbin/mkfs.xfs'));
  IMAGES = pooled ? join(svc.dataDir, 'image-pool') : svc.dataDir;
  MODE = pooled ? 'reflink' : 'copy';
  c = await connectV2(svc);
  const r = await call(c, 'workspace_open', { repositoryUrl: a, idempotencyKey: 'open-ckpt-1' });
  if (!r.ok) throw new Error(r.text);
  ws1 = r.result.workspaceId as string;
}, 180_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
  if (canary) rmSync(canary, { recursive: true, force: true });
});

function canaryState(): string {
  const st = statSync(canary);
  const f = statSync(join(canary, 'secret'));
  return JSON.stringify({ d: [st.uid, st.gid, st.mode], f: [f.uid, f.gid, f.mode, f.size], names: readdirSync(canary), text: readFileSync(join(canary, 'secret'), 'utf8') });
}

describe('checkpoint and restore', () => {
  it('restores symlinks, hard links, sparse and large files, exec bits, home, tmp and a dirty git index byte for byte; processes are stopped first', async () => {
    const before = canaryState();
    await sh(
      ws1,
      [
        'set -e',
        'mkdir -p links bin /tmp/t ~/.config/app',
        `ln -s ../README.md links/rel && ln -s /etc/passwd links/abs && ln -s does/not/exist links/dangling && ln -s ${canary} links/host-canary && ln -s ${canary}/secret links/host-secret`,
        'echo shared > links/h1 && ln links/h1 links/h2 && ln links/h1 /workspace/h3',
        'truncate -s 300M sparse.bin && printf middle | dd of=sparse.bin bs=1 seek=150000000 conv=notrunc status=none',
        'head -c 100000000 /dev/urandom > large.bin',
        "printf '#!/bin/sh\\necho run\\n' > bin/tool && chmod 755 bin/tool && echo data > bin/data && chmod 640 bin/data && chmod 4755 bin/data || true",
        'echo staged >> README.md && git add README.md && echo unstaged >> README.md && echo new > untracked.txt && git add -N untracked.txt',
        'echo home > ~/.config/app/settings && echo tmp > /tmp/t/file && mkfifo /tmp/t/fifo',
      ].join('; '),
    );
    const status = await sh(ws1, 'git status --porcelain=v1'); // first: it may refresh the index
    const manifest = await sh(ws1, MANIFEST);
    const index = await sh(ws1, 'sha256sum .git/index');
    expect(manifest).toContain('links/host-canary|l|777');
    expect(status).toContain('MM README.md');

    const cp = await ok('checkpoint_create', { workspaceId: ws1, idempotencyKey: key(), label: 'everything' });
    expect(cp.checkpointId).toMatch(/^ckpt_[A-Za-z0-9_-]{20,80}$/);
    expect(cp).toMatchObject({ workspaceId: ws1, label: 'everything', copyMode: MODE, processesFrozen: true, retentionSeconds: 604800 });
    // The sparse 300 MB file is not copied as 300 MB: the copy takes about what the source does.
    expect(cp.diskBytes as number).toBeGreaterThan(100_000_000);
    expect(cp.diskBytes as number).toBeLessThan(250_000_000);
    // What it added to the disk: a reflink clone shares every block with the workspace's image as it is made; a copy adds them all.
    if (MODE === 'reflink') expect(cp.addedBytes as number).toBeLessThan((cp.diskBytes as number) / 10);
    else expect(cp.addedBytes).toBe(cp.diskBytes);
    const file = join(IMAGES, 'checkpoints', `${cp.checkpointId}.img`);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(statSync(join(IMAGES, 'checkpoints')).mode & 0o777).toBe(0o700);

    // Everything changes after the checkpoint; a process runs in the background.
    await sh(ws1, `set -e; rm -rf links bin large.bin; echo changed > sparse.bin; git add -A; git -c user.name=t -c user.email=t@example.com commit -qm gone; rm -f ~/.config/app/settings /tmp/t/file; ln -sfn /etc links2`);
    const bg = await ok('exec_run', { workspaceId: ws1, command: 'sleep 1000', async: true });
    expect(bg.operationId).toBeTruthy();
    // The async command starts in the background: wait (bounded) until its process exists.
    expect((await sh(ws1, 'for i in $(seq 300); do pgrep -x sleep && exit 0; sleep 0.1; done; true')).trim()).not.toBe('');

    const r = await ok('checkpoint_restore', { workspaceId: ws1, checkpointId: cp.checkpointId, idempotencyKey: key() });
    expect(r).toMatchObject({ restored: true, processesStopped: true, sandboxRestarted: true });
    expect((await sh(ws1, 'pgrep -x sleep || true')).trim()).toBe('');
    expect(await sh(ws1, MANIFEST)).toBe(manifest);
    expect(await sh(ws1, 'sha256sum .git/index')).toBe(index);
    expect(await sh(ws1, 'git status --porcelain=v1')).toBe(status);
    expect((await sh(ws1, 'bin/tool')).trim()).toBe('run');
    // Symlinks are symlinks again, pointing where they pointed; none was followed as root.
    expect((await sh(ws1, 'readlink links/host-canary; cat links/host-secret 2>&1 || true')).trim()).toMatch(new RegExp(`^${canary}\\n.*(Permission denied|No such file)`));
    expect(canaryState()).toBe(before);
    await ok('checkpoint_delete', { checkpointId: cp.checkpointId });
    expect(existsSync(file)).toBe(false);
    await sh(ws1, 'rm -f large.bin sparse.bin');
  }, 600_000);
});

describe('fork', () => {
  it('a fork taken while a command writes is consistent, has its own lease, limits, network profile and filesystem, and shares nothing writable with its source', async () => {
    await sh(ws1, 'rm -f counter log');
    // The writer appends a line then renames a counter file, as fast as it can.
    const writer = await ok('exec_run', {
      workspaceId: ws1,
      command: 'i=0; while :; do i=$((i+1)); echo $i >> log; echo $i > counter.tmp; mv counter.tmp counter; done',
      async: true,
      timeoutMs: 300_000,
    });
    expect(writer.operationId).toBeTruthy();
    writerOp = writer.operationId as string;
    // Wait (bounded by lines, not time) until it has written something.
    for (let i = 0; i < 600 && Number((await sh(ws1, 'cat counter 2>/dev/null || echo 0')).trim()) < 200; i++);
    const f = await ok('workspace_fork', { workspaceId: ws1, networkProfile: 'dependency-access', idempotencyKey: key() });
    const fork = f.workspaceId as string;
    expect(fork).toMatch(/^ws_/);
    expect(fork).not.toBe(ws1);
    expect(f).toMatchObject({ state: 'active', networkProfile: 'dependency-access', forkedFrom: { workspaceId: ws1 }, copyMode: MODE, processesFrozen: true });
    expect(f.frozenMs as number).toBeGreaterThanOrEqual(0);

    // Consistent: every log line is whole and in sequence; the counter is the last line or the one before it (the rename after the append).
    const lines = Number((await sh(fork, `awk '$0 != NR { print "line " NR " is " $0; exit 1 } END { print NR }' log`)).trim());
    expect(lines).toBeGreaterThan(100);
    const counter = Number((await sh(fork, 'cat counter')).trim());
    expect([lines, lines - 1]).toContain(counter);
    // Nothing of the source runs in the fork: its files stand still; the source's writer goes on.
    expect((await sh(fork, "pgrep -f 'counter[.]tmp' || true")).trim()).toBe('');
    expect(Number((await sh(fork, 'cat counter')).trim())).toBe(counter);
    const later = Number((await sh(ws1, 'cat counter')).trim());
    expect(later).toBeGreaterThan(counter);
    await ok('operation_cancel', { operationId: writer.operationId });

    // Own lease and status, own cgroup, own filesystem (another device), the source's untouched.
    const st = await ok('workspace_status', { workspaceId: fork });
    expect(st).toMatchObject({ state: 'active', sandboxRunning: true, networkProfile: 'dependency-access' });
    // (Inside, /proc/self/cgroup is namespaced; on the host the fork has a cgroup of its own.)
    expect(execFileSync('find', ['/sys/fs/cgroup/memory', '-maxdepth', '8', '-type', 'd', '-name', fork], { encoding: 'utf8' }).trim()).not.toBe('');
    const dev = (ws: string) => sh(ws, "grep ' /workspace ' /proc/self/mountinfo | cut -d' ' -f3");
    expect(await dev(fork)).not.toBe(await dev(ws1));
    expect((await ok('workspace_status', { workspaceId: ws1 })).networkProfile).toBe('network-none');

    // Isolation both ways: writes on either side stay there; the fork cannot find the source's new files anywhere.
    const marker = `SOURCE-${Date.now()}`;
    await sh(ws1, `echo ${marker} > secret-after-fork; echo source > same.txt`);
    await sh(fork, 'echo fork > same.txt; echo fork-only > fork.txt');
    expect((await sh(ws1, 'cat same.txt; ls fork.txt 2>&1 || true'))).toMatch(/^source\n.*No such file/);
    expect((await sh(fork, 'cat same.txt; ls secret-after-fork 2>&1 || true'))).toMatch(/^fork\n.*No such file/);
    expect((await sh(fork, `grep -rsl ${marker} /workspace /home /tmp /proc/*/root/workspace 2>/dev/null || true`)).trim()).toBe('');
    // The active workspace did not change: a call without workspaceId acts on ws1.
    expect((await ok('exec_run', { command: 'cat same.txt' })).stdout).toBe('source\n');

    await ok('workspace_close', { workspaceId: fork });
    expect(existsSync(join(IMAGES, 'disks', `${fork}.img`))).toBe(false);
    expect((await sh(ws1, 'cat same.txt')).trim()).toBe('source');
  }, 600_000);

  it('forks a checkpoint twice: two independent workspaces on the same branch, editing the same file apart; the work comes back as a patch', async () => {
    const cp = await ok('checkpoint_create', { workspaceId: ws1, idempotencyKey: key() });
    const a = (await ok('workspace_fork', { checkpointId: cp.checkpointId, idempotencyKey: key() })) as R;
    const b = (await ok('workspace_fork', { checkpointId: cp.checkpointId, idempotencyKey: key() })) as R;
    expect(a).toMatchObject({ forkedFrom: { checkpointId: cp.checkpointId, workspaceId: ws1 }, copyMode: MODE, networkProfile: 'network-none' });
    const [fa, fb] = [a.workspaceId as string, b.workspaceId as string];
    expect(await sh(fa, 'git rev-parse --abbrev-ref HEAD')).toBe(await sh(ws1, 'git rev-parse --abbrev-ref HEAD'));
    await sh(fa, "sed -i 's/^# demo$/# demo from A/' README.md");
    await sh(fb, "sed -i 's/^# demo$/# demo from B/' README.md");
    expect(await sh(fa, 'head -1 README.md')).toBe('# demo from A\n');
    expect(await sh(fb, 'head -1 README.md')).toBe('# demo from B\n');
    expect(await sh(ws1, 'head -1 README.md')).toBe('# demo\n');
    const pa = await ok('workspace_recover', { workspaceId: fa, mode: 'patch' });
    expect(String(pa.patch)).toContain('+# demo from A');
    expect(String(pa.patch)).not.toContain('from B');
    // Deleting the checkpoint leaves the forks whole (they are copies).
    await ok('checkpoint_delete', { checkpointId: cp.checkpointId });
    expect(await sh(fa, 'head -1 README.md')).toBe('# demo from A\n');
    const list = await ok('checkpoint_list', { workspaceId: ws1 });
    expect((list.checkpoints as R[]).some((x) => x.checkpointId === cp.checkpointId)).toBe(false);
    await ok('workspace_close', { workspaceId: fa });
    await ok('workspace_close', { workspaceId: fb });
  }, 600_000);
});

describe('limits, retention, errors', () => {
  it('refuses past the count quota and past the disk quota with RESOURCE_EXHAUSTED naming the limit; a delete makes room', async () => {
    if (writerOp) await call(c, 'operation_cancel', { operationId: writerOp });
    await sh(ws1, 'rm -f large.bin sparse.bin');
    for (const x of (await ok('checkpoint_list', {})).checkpoints as R[]) await ok('checkpoint_delete', { checkpointId: x.checkpointId });
    const made: string[] = [];
    for (let i = 0; i < MAX_COUNT; i++) made.push((await ok('checkpoint_create', { workspaceId: ws1, idempotencyKey: key() })).checkpointId as string);
    const full = await fail('checkpoint_create', { workspaceId: ws1, idempotencyKey: key() });
    expect(full).toMatchObject({ code: 'RESOURCE_EXHAUSTED', details: { rule: 'checkpoint count quota', count: MAX_COUNT, maxCount: MAX_COUNT } });
    expect(full.message).toContain('--checkpoint-max-count');
    await ok('checkpoint_delete', { checkpointId: made.pop() });
    const again = await ok('checkpoint_create', { workspaceId: ws1, idempotencyKey: key() });
    made.push(again.checkpointId as string);
    for (const id of made) await ok('checkpoint_delete', { checkpointId: id });

    // Bytes: a checkpoint of a workspace holding 150 MB fits in 400 MiB; with 300 MB the second does not fit beside it; once 150 MB are deleted again (trimmed before the copy) it does.
    await sh(ws1, 'head -c 150000000 /dev/urandom > big1.bin');
    const one = await ok('checkpoint_create', { workspaceId: ws1, idempotencyKey: key() });
    await sh(ws1, 'head -c 150000000 /dev/urandom > big2.bin');
    const over = await fail('checkpoint_create', { workspaceId: ws1, idempotencyKey: key() });
    expect(over).toMatchObject({ code: 'RESOURCE_EXHAUSTED', details: { rule: 'checkpoint disk quota', quotaBytes: QUOTA_MB * 1_048_576, usedBytes: one.diskBytes } });
    expect((over.details.usedBytes as number) + (over.details.needBytes as number)).toBeGreaterThan(QUOTA_MB * 1_048_576);
    expect(over.message).toContain('--checkpoint-quota-mb');
    expect(readdirSync(join(IMAGES, 'checkpoints')).length).toBe(1); // nothing half-made is left
    await sh(ws1, 'rm big2.bin');
    const fits = await ok('checkpoint_create', { workspaceId: ws1, idempotencyKey: key() });
    expect((fits.quota as R).usedBytes as number).toBeLessThanOrEqual(QUOTA_MB * 1_048_576);
    for (const id of [one.checkpointId, fits.checkpointId]) await ok('checkpoint_delete', { checkpointId: id });
    await sh(ws1, 'rm -f big1.bin');
  }, 600_000);

  it('a checkpoint goes when its retention ends (its image too)', async () => {
    const cp = await ok('checkpoint_create', { workspaceId: ws1, idempotencyKey: key(), retentionSeconds: 60 });
    const file = join(IMAGES, 'checkpoints', `${cp.checkpointId}.img`);
    expect(existsSync(file)).toBe(true);
    // 60 retention-seconds are 1.2 s here; the sweep runs every 0.6 s. Polled, with a generous bound.
    for (let i = 0; i < 300 && existsSync(file); i++) await new Promise((r) => setTimeout(r, 100));
    expect(existsSync(file)).toBe(false);
    expect((await fail('checkpoint_restore', { workspaceId: ws1, checkpointId: cp.checkpointId, idempotencyKey: key() })).code).toBe('NOT_FOUND');
  }, 120_000);

  it('refuses bad input naming the field; a checkpoint is restored only into its own workspace; /metrics says which copy ran', async () => {
    const both = await fail('workspace_fork', { workspaceId: ws1, checkpointId: 'ckpt_' + 'a'.repeat(24), idempotencyKey: key() });
    expect(both).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'checkpointId' } });
    const neither = await fail('workspace_fork', { idempotencyKey: key() });
    expect(neither).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'checkpointId' } });
    expect((await fail('checkpoint_delete', { checkpointId: 'ckpt_' + 'b'.repeat(24) })).code).toBe('NOT_FOUND');
    expect((await fail('checkpoint_restore', { workspaceId: ws1, checkpointId: 'art_' + 'b'.repeat(24), idempotencyKey: key() })).details.field).toBe('checkpointId');

    const cp = await ok('checkpoint_create', { workspaceId: ws1, idempotencyKey: key() });
    const other = (await ok('workspace_fork', { checkpointId: cp.checkpointId, idempotencyKey: key() })).workspaceId as string;
    const wrong = await fail('checkpoint_restore', { workspaceId: other, checkpointId: cp.checkpointId, idempotencyKey: key() });
    expect(wrong).toMatchObject({ code: 'FAILED_PRECONDITION', details: { field: 'checkpointId', rule: 'same workspace' } });
    await ok('workspace_close', { workspaceId: other });
    expect((await fail('checkpoint_create', { workspaceId: other, idempotencyKey: key() })).code).toBe('NOT_FOUND');
    expect((await fail('workspace_fork', { workspaceId: other, idempotencyKey: key() })).code).toBe('NOT_FOUND');
    await ok('checkpoint_delete', { checkpointId: cp.checkpointId });

    const res = await fetch(`${svc.url}/metrics`, { headers: { authorization: `Bearer ${svc.token}` } });
    const text = await res.text();
    expect(text).toMatch(new RegExp(`atelier_checkpoint_copies_total\\{op="checkpoint",mode="${MODE}"\\} [1-9]`));
    expect(text).toMatch(new RegExp(`atelier_checkpoint_copies_total\\{op="fork_live",mode="${MODE}"\\} [1-9]`));
    expect(text).toMatch(new RegExp(`atelier_checkpoint_copies_total\\{op="fork_checkpoint",mode="${MODE}"\\} [1-9]`));
    expect(text).toMatch(/atelier_checkpoint_refused_total\{limit="count"\} [1-9]/);
    // No filesystem of the service is left frozen, nothing of a closed fork is left mounted.
    const mounts = execFileSync('cat', ['/proc/mounts'], { encoding: 'utf8' }).split('\n').filter((l) => l.includes(svc.dataDir));
    expect(mounts.some((l) => l.includes(`/workspaces/${ws1} `))).toBe(true);
    expect(mounts.some((l) => l.includes(other))).toBe(false);
    // fsfreeze --unfreeze of a filesystem that is not frozen fails: the source's is not frozen.
    expect(() => execFileSync('fsfreeze', ['--unfreeze', join(svc.dataDir, 'workspaces', ws1)], { stdio: 'pipe' })).toThrow();
  }, 300_000);
});

describe('dashboard', () => {
  it('shows checkpoints and forks per workspace in a real browser and deletes a checkpoint there; the REST paths refuse without a session or CSRF', async () => {
    const cp = await ok('checkpoint_create', { workspaceId: ws1, idempotencyKey: key(), label: 'before refactor' });
    const fork = (await ok('workspace_fork', { checkpointId: cp.checkpointId, idempotencyKey: key() })).workspaceId as string;
    const live = (await ok('workspace_fork', { workspaceId: ws1, idempotencyKey: key() })).workspaceId as string;
    expect((await httpRequest(svc.url, 'GET', '/api/v1/checkpoints')).status).toBe(401);
    const browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    try {
      const ctx = await browser.newContext({ viewport: { width: 1366, height: 900 } });
      const page = await ctx.newPage();
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(svc.loginLink);
      await page.waitForSelector('main.content[data-page="overview"]');
      await page.goto(`${svc.url}/#/workspaces`);
      const row = page.locator(`[data-testid="ckpt-${cp.checkpointId}"]`);
      await row.waitFor();
      expect(await row.textContent()).toContain('before refactor');
      expect(await row.textContent()).toContain(MODE);
      const source = page.locator(`[data-testid="ckpt-ws-${ws1}"]`);
      const forks = await source.locator('[data-testid="forks"]').textContent();
      expect(forks).toContain(fork);
      expect(forks).toContain(`from checkpoint ${cp.checkpointId}`);
      expect(forks).toContain(live);
      expect(forks).toContain('of the live workspace');
      expect(await page.locator(`[data-testid="ckpt-ws-${fork}"] [data-testid="forked-from"]`).textContent()).toContain(ws1);

      // The REST path behind the page: a change needs the session's CSRF token.
      const cookie = (await ctx.cookies()).find((k) => k.name === 'atelier_session')!;
      const h = `atelier_session=${cookie.value}`;
      expect((await httpRequest(svc.url, 'DELETE', `/api/v1/checkpoints/${cp.checkpointId}`, { cookie: h })).status).toBe(403);
      const csrf = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/session', { cookie: h })).body).csrfToken;
      const missing = await httpRequest(svc.url, 'DELETE', `/api/v1/checkpoints/ckpt_${'z'.repeat(24)}`, { cookie: h, 'x-csrf-token': csrf });
      expect(missing.status).toBe(404);
      expect(JSON.parse(missing.body).error.details.field).toBe('checkpointId');

      page.once('dialog', (d) => void d.accept());
      await page.locator(`[data-testid="delete-${cp.checkpointId}"]`).click();
      await row.waitFor({ state: 'detached' });
      expect((await ok('checkpoint_list', {})).checkpoints as R[]).toEqual([]);
      // The forks stay, and still say where they came from.
      expect(await page.locator(`[data-testid="ckpt-ws-${fork}"] [data-testid="forked-from"]`).textContent()).toContain(cp.checkpointId as string);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
    await ok('workspace_close', { workspaceId: fork });
    await ok('workspace_close', { workspaceId: live });
  }, 300_000);
});

describe('without a filesystem per workspace', () => {
  it('checkpoint_create and workspace_fork refuse with FAILED_PRECONDITION naming the setting (sandboxDiskMb 0)', async () => {
    const flat = await startWorkspaceService(host, { config: { sandboxDiskMb: 0, knowledgeEmbeddings: 'off' } });
    const fc = await connectV2(flat);
    try {
      const url = (await host.createRepo('approved/ckpt-flat', REPO_FILES)).url;
      const o = await call(fc, 'workspace_open', { repositoryUrl: url, idempotencyKey: 'open-flat-1' });
      if (!o.ok) throw new Error(o.text);
      const id = o.result.workspaceId as string;
      for (const [name, args] of [['checkpoint_create', { workspaceId: id, idempotencyKey: key() }], ['workspace_fork', { workspaceId: id, idempotencyKey: key() }]] as const) {
        const r = await call(fc, name, args);
        expect(r.ok, name).toBe(false);
        if (!r.ok) {
          expect(r.error.code).toBe('FAILED_PRECONDITION');
          expect(r.error.details.setting).toBe('sandboxDiskMb');
          expect(r.error.message).toContain('--sandbox-disk-mb');
        }
      }
      expect(readdirSync(join(flat.dataDir, 'checkpoints'))).toEqual([]);
      // Nothing half-made: only the one workspace exists.
      const list = await call(fc, 'workspace_list', {});
      if (list.ok) expect((list.result.workspaces as R[]).map((w) => w.workspaceId)).toEqual([id]);
    } finally {
      await fc.close();
      await flat.dispose();
    }
  }, 300_000);
});
