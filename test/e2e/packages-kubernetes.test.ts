/**
 * Managed packages under `--executor kubernetes` through the real service on the fixture API
 * server (test/fixtures/kube-apiserver/, each Pod a local bubblewrap sandbox), issue #34: a
 * release reaches a Pod as a read-only copy the runner streams in before the Pod's own code
 * starts (src/sandbox/kubernetes/release-volumes.ts; docs/packages.md "Releases on Kubernetes").
 *
 * The release is built first by the same data directory's runner on bubblewrap (one host), then
 * the runner starts again with the Kubernetes driver: the toolbox target and a new workspace Pod
 * get the bound release read-only, its binary runs, nothing else of the host shows.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, dashboardLogin, httpRequest, startService, unmountUnder, type Service } from './harness.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import { startRegistry, type Registry } from '../fixtures/verdaccio.js';
import type { GitHost } from '../fixtures/githost.js';
import type { KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { startKubeTarget } from './kube-fixture.js';

const isRoot = process.getuid?.() === 0;
type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe.skipIf(!isRoot)('managed packages on the kubernetes executor', () => {
  let host: GitHost;
  let reg: Registry;
  let api: KubeApiServer;
  let sbApi: KubeApiServer | undefined;
  let svc: Service;
  let c: Client;
  let repoUrl: string;
  let kubeArgs: string[];
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-pkk-'));
  let stored: string[] = [];
  let session: { cookie: string; csrf: string } | undefined;

  async function ok(name: string, a: Record<string, unknown>): Promise<R> {
    const r = await call(c, name, a);
    if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
    return r.result as R;
  }
  async function install(args: Record<string, unknown>): Promise<R> {
    const plan = await ok('packages_plan', args);
    session ??= await dashboardLogin(svc);
    const { cookie, csrf } = session;
    expect((await httpRequest(svc.url, 'POST', `/api/v1/approvals/${plan.approvalRequestId}/approve`, { cookie, 'x-csrf-token': csrf })).status).toBe(200);
    const started = await ok('packages_apply', { planId: plan.planId, planDigest: plan.planDigest });
    for (let i = 0; i < 60; i++) {
      const s = await ok('packages_status', { applyId: started.applyId, waitMs: 10000 });
      if (s.state === 'SUCCEEDED' || s.state === 'FAILED') return s;
    }
    throw new Error('apply did not end');
  }
  const podsMade = (): R[] => stored.map((e) => JSON.parse(e) as R).filter((e) => e.type === 'ADDED' && e.object?.kind === 'Pod').map((e) => e.object);

  beforeAll(async () => {
    if (!isRoot) return;
    reg = await startRegistry();
    await reg.publish({ name: 'left-helper', version: '1.0.0' });
    await reg.publish({
      name: 'cli-demo',
      version: '1.0.0',
      dependencies: { 'left-helper': '^1.0.0' },
      bin: { 'cli-demo': 'bin/cli.js' },
      files: { 'bin/cli.js': "#!/usr/bin/env node\nrequire('left-helper');\nconsole.log('cli-demo 1.0.0');\n" },
    });
    host = await startGitHost();
    repoUrl = (await host.createRepo('approved/pkk', REPO_FILES)).url;
    const caFile = join(dataDir, 'registry-ca.pem');
    writeFileSync(caFile, readFileSync(reg.caCertPath, 'utf8'));
    await configFor(host, dataDir, { sandboxDiskMb: 0, packagesEnabled: true, packagesNpmRegistry: reg.url, packagesCaFile: caFile });
    const kube = await startKubeTarget({ record: true });
    api = kube.api!;
    stored = kube.stored;
    kubeArgs = kube.args;
    svc = await startService({ dataDir, args: kubeArgs });
    c = await connectV2(svc);
  }, 300_000);

  afterAll(async () => {
    if (!isRoot) return;
    await c?.close();
    await svc?.stop().catch(() => undefined);
    await api?.close();
    await sbApi?.close();
    await host?.close();
    await reg?.close();
    unmountUnder(dataDir);
  });

  it('a package build runs as a short-lived Pod (registry only, through the tunnel); its tree comes back as a tar the runner parses; the launch check runs in a Pod with the release copied in', async () => {
    const done = await install({ ecosystem: 'npm', name: 'cli-demo', version: '1.0.0' });
    expect(done.state, JSON.stringify(done)).toBe('SUCCEEDED');
    const list = await ok('packages_list', {});
    expect(list.bindings.find((x: R) => x.name === 'cli-demo')).toMatchObject({ scope: 'owner', release: { version: '1.0.0', present: true, binaries: ['cli-demo'] } });
    // The build's Pod took its directory on its scratch claim; the launch check's got the release read-only.
    const pods = podsMade().filter((p) => p.metadata.labels?.['atelier.dev/role'] === 'ephemeral');
    expect(pods.length).toBeGreaterThanOrEqual(2);
    expect(JSON.stringify(pods)).not.toContain(dataDir);
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
    expect(api.store.list('persistentvolumeclaims', 'atelier')).toEqual([]);
  }, 300_000);

  it('hostile builds: a fifo in the tree refuses it (no release); planted links stay links, never followed', async () => {
    await reg.publish({ name: 'evil-fifo', version: '1.0.0', scripts: { postinstall: 'mkfifo pipe' } });
    const fifo = await install({ ecosystem: 'npm', name: 'evil-fifo', lifecycleScripts: true });
    expect([fifo.state, fifo.errorCode], JSON.stringify(fifo)).toEqual(['FAILED', 'TREE_MISMATCH']);
    expect(fifo.error).toMatch(/refused: node_modules\/evil-fifo\/pipe: a special file/);
    expect((await ok('packages_list', {})).bindings.find((x: R) => x.name === 'evil-fifo')).toBeUndefined();
    const canary = join(dataDir, 'canary');
    writeFileSync(canary, 'host secret', { mode: 0o600 });
    await reg.publish({ name: 'evil-link', version: '1.0.0', scripts: { postinstall: `ln -s / root-link && ln -s ${canary} host-link` } });
    const link = await install({ ecosystem: 'npm', name: 'evil-link', lifecycleScripts: true });
    expect(link.state, JSON.stringify(link)).toBe('SUCCEEDED');
    expect(readFileSync(canary, 'utf8')).toBe('host secret');
    const tb = await ok('bash', { target: 'toolbox', command: 'd=/opt/packages/npm/evil-link/node_modules/evil-link; readlink $d/root-link $d/host-link; cat $d/host-link 2>&1 | grep -c "host secret"' });
    expect(tb.stdout).toBe(`/\n${canary}\n0\n`);
  }, 300_000);

  it('the bash toolbox target: the bound release is copied into its Pod read-only before the command starts; no network, no checkout', async () => {
    const tb = await ok('bash', { target: 'toolbox', command: 'cli-demo; command -v cli-demo; touch /opt/packages/npm/cli-demo/node_modules/x 2>&1; echo rc=$?; (exec 3<>/dev/tcp/1.1.1.1/443) 2>/dev/null && echo NET || echo NONET; ls -A /workspace | wc -l' });
    expect(tb.stdout).toContain('cli-demo 1.0.0\n/opt/packages/npm/cli-demo/node_modules/.bin/cli-demo\n');
    expect(tb.stdout).toMatch(/Read-only file system\nrc=1\nNONET\n0\n$/);
    // Its Pod: an init container filled an emptyDir the command's container mounts read-only; it is gone after.
    const pod = podsMade().find((p) => p.metadata.labels?.['atelier.dev/role'] === 'ephemeral' && p.spec.initContainers);
    expect(pod?.spec.initContainers.map((x: R) => x.name)).toEqual(['releases']);
    expect(pod?.spec.containers[0].volumeMounts.filter((m: R) => m.name === 'releases')).toEqual([{ name: 'releases', mountPath: '/opt/packages/npm/cli-demo/node_modules', subPath: 'r0', readOnly: true }]);
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
  }, 180_000);

  it('a new workspace Pod gets its bound release read-only; its binary runs from exec, also after a runner restart makes the Pod again', async () => {
    const ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'pkk-open' })).workspaceId as string;
    const r = await ok('exec_run', { workspaceId: ws, command: 'cli-demo && touch /opt/packages/npm/cli-demo/node_modules/x 2>&1; echo rc=$?; cat README.md | head -1' });
    expect(r.stdout).toMatch(/^cli-demo 1\.0\.0\n.*Read-only file system\nrc=1\n# demo/s);
    const pods = api.store.list('pods', 'atelier', `atelier.dev/workspace=${ws}`) as R[];
    expect(pods.length).toBe(1);
    expect(pods[0]!.spec.initContainers.map((x: R) => x.name)).toEqual(['releases']);
    // A runner restart stops the Pod; the next runner makes it again with the same releases copied in.
    const before = pods[0]!.metadata.uid;
    await c.close();
    const token = svc.token;
    expect(await svc.stop('SIGTERM')).toBe(0);
    svc = { ...(await startService({ dataDir, args: kubeArgs })), token };
    c = await connectV2(svc);
    session = undefined;
    const again = await ok('exec_run', { workspaceId: ws, command: 'cli-demo; touch /opt/packages/npm/cli-demo/node_modules/x 2>&1 | grep -c Read-only' });
    expect(again.stdout).toBe('cli-demo 1.0.0\n1\n');
    expect((api.store.list('pods', 'atelier', `atelier.dev/workspace=${ws}`) as R[]).map((p) => p.metadata.uid)).not.toEqual([before]);
    await ok('workspace_close', { workspaceId: ws });
  }, 300_000);

  it('with agent-sandbox installed a workspace is a Sandbox: its pod template carries the release copy, the runner fills the Pod its controller makes; again when the next runner resumes it', async () => {
    const sbKube = await startKubeTarget({ fixture: { agentSandbox: true } });
    sbApi = sbKube.api!;
    const sbArgs = sbKube.args;
    await c.close();
    const token = svc.token;
    expect(await svc.stop('SIGTERM')).toBe(0);
    svc = { ...(await startService({ dataDir, args: sbArgs })), token };
    c = await connectV2(svc);
    const ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'pkk-open-sandbox' })).workspaceId as string;
    const check = 'cli-demo && touch /opt/packages/npm/cli-demo/node_modules/x 2>&1 | grep -c Read-only; head -1 README.md';
    expect((await ok('exec_run', { workspaceId: ws, command: check })).stdout).toBe('cli-demo 1.0.0\n1\n# demo\n');
    expect(await ok('workspace_status', { workspaceId: ws })).toMatchObject({ sandboxKind: 'kubernetes-sandbox', sandboxObject: { kind: 'Sandbox' } });
    const [sb] = sbApi.store.list('sandboxes', 'atelier', `atelier.dev/workspace=${ws}`) as R[];
    expect(sb!.spec.podTemplate.spec.initContainers.map((x: R) => x.name)).toEqual(['releases']);
    expect(sb!.spec.podTemplate.spec.containers[0].volumeMounts).toContainEqual({ name: 'releases', mountPath: '/opt/packages/npm/cli-demo/node_modules', subPath: 'r0', readOnly: true });
    expect(JSON.stringify(sb)).not.toContain(dataDir);
    const pod = () => (sbApi.store.list('pods', 'atelier', `atelier.dev/workspace=${ws}`) as R[])[0];
    expect(pod()!.metadata.ownerReferences[0]).toMatchObject({ kind: 'Sandbox', name: sb!.metadata.name });
    expect(pod()!.spec.initContainers.map((x: R) => x.name)).toEqual(['releases']);
    // A runner restart suspends the Sandbox; the next runner resumes it and fills its new Pod.
    const before = pod()!.metadata.uid;
    await c.close();
    expect(await svc.stop('SIGTERM')).toBe(0);
    svc = { ...(await startService({ dataDir, args: sbArgs })), token };
    c = await connectV2(svc);
    expect((await ok('exec_run', { workspaceId: ws, command: check })).stdout).toBe('cli-demo 1.0.0\n1\n# demo\n');
    expect(pod()!.metadata.uid).not.toBe(before);
    expect((sbApi.store.list('sandboxes', 'atelier', `atelier.dev/workspace=${ws}`) as R[])[0]!.metadata.uid).toBe(sb!.metadata.uid);
    await ok('workspace_close', { workspaceId: ws });
  }, 300_000);
});
