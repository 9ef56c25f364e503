/**
 * Workspaces claimed from an agent-sandbox SandboxWarmPool (issue #34, `--kube-warm-pool`),
 * through the real service (`bin/atelier serve --executor kubernetes`, official MCP client) on
 * the fixture API server (test/fixtures/kube-apiserver/, its SandboxWarmPool and SandboxClaim
 * controllers: agent-sandbox.ts). The pool's Pod runs before the open; the open claims it
 * (SandboxClaim), the workspace's environment (an injected environment with a secret) reaches
 * its commands after start and is in no stored object, its NetworkPolicy selects the claimed
 * Pod; files and exec work; a runner killed outright reattaches through the claim; an empty pool
 * gives a cold claim; close deletes the claim and with it the Sandbox. (The service's spare
 * sandbox, made ahead of a plain open, is claimed from the pool like any workspace.)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, runCli, startService, unmountUnder, type Service } from './harness.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import type { KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { startKubeTarget } from './kube-fixture.js';
import type { KubeObject } from '../fixtures/kube-apiserver/store.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';
import { sandboxManifest } from '../../src/sandbox/kubernetes/sandbox-objects.js';

const isRoot = process.getuid?.() === 0;
const NS = 'atelier';
const SECRET = 'warm-pool-s3cret-value';
type Obj = KubeObject & { metadata: KubeObject['metadata'] & { ownerReferences?: { kind: string; name: string }[] }; spec: Record<string, unknown>; status?: Record<string, unknown> };
type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

async function until<T>(fn: () => T | undefined | Promise<T | undefined>, what: string, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe.skipIf(!isRoot)('workspaces claimed from a SandboxWarmPool (--kube-warm-pool)', () => {
  let host: GitHost;
  let api: KubeApiServer;
  let svc: Service;
  let c: Client;
  let repoUrl: string;
  let envId: string;
  let args: string[] = [];
  const open: string[] = [];
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-kwp-'));

  async function ok(name: string, a: Record<string, unknown>): Promise<R> {
    const r = await call(c, name, a);
    if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
    return r.result as R;
  }
  const get = (resource: string, name: string) => api.store.find(resource, NS, name) as Obj | undefined;
  const poolSandboxes = () => (api.store.list('sandboxes', NS) as Obj[]).filter((s) => s.metadata.ownerReferences?.[0]?.kind === 'SandboxWarmPool');
  const claimGauge = async (): Promise<string[]> => {
    const r = await fetch(`${svc.url}/metrics`, { headers: { authorization: `Bearer ${svc.token}` } });
    return (await r.text()).split('\n').filter((l) => l.startsWith('atelier_workspace_sandbox_claims{'));
  };

  beforeAll(async () => {
    host = await startGitHost();
    repoUrl = (await host.createRepo('approved/warm', REPO_FILES)).url;
    await configFor(host, dataDir, { sandboxDiskMb: 0 });
    const created = await runCli(['env', 'create', 'warm-env', '--data-dir', dataDir]);
    expect(created.code, created.stderr).toBe(0);
    envId = created.stdout.split(/\s+/)[0]!;
    expect((await runCli(['env', 'set', 'warm-env', 'API_TOKEN', '--secret', '--data-dir', dataDir], { input: SECRET + '\n' })).code).toBe(0);
    expect((await runCli(['env', 'set', 'warm-env', 'PLAIN_VAR=hello-warm', '--data-dir', dataDir])).code).toBe(0);
    const kube = await startKubeTarget({ fixture: { agentSandbox: true }, namespace: NS });
    api = kube.api!;
    // The operator's template: the workspace Pod for the runner's limits (configFor: 256 MiB, 128 pids, one core), no per-workspace labels.
    const sb = sandboxManifest({ name: 'tmpl', id: 'tmpl', version: 'v1beta1', limits: { memoryBytes: 256 * 1024 * 1024, pidsMax: 128, cpuQuotaPercent: 100 }, o: { namespace: NS, workspaceImage: 'atelier-workspace:test', runDir: dataDir } });
    const podTemplate = sb.spec.podTemplate as { metadata: { labels: Record<string, string> } };
    delete podTemplate.metadata.labels['atelier.dev/policy'];
    delete podTemplate.metadata.labels['atelier.dev/workspace'];
    api.store.create('sandboxtemplates', NS, { apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxTemplate', metadata: { name: 'atelier-workspace' }, spec: { podTemplate, volumeClaimTemplates: sb.spec.volumeClaimTemplates } });
    api.store.create('sandboxwarmpools', NS, { apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxWarmPool', metadata: { name: 'atelier-workspace' }, spec: { replicas: 1, sandboxTemplateRef: { name: 'atelier-workspace' } } });
    await until(() => ((get('sandboxwarmpools', 'atelier-workspace')?.status as { readyReplicas?: number } | undefined)?.readyReplicas === 1 ? true : undefined), 'the warm pool Ready');
    args = [...kube.args, '--kube-warm-pool', 'atelier-workspace'];
    svc = await startService({ dataDir, args });
    c = await connectV2(svc);
  }, 240_000);

  afterAll(async () => {
    for (const ws of open) if (c) await call(c, 'workspace_close', { workspaceId: ws }).catch(() => undefined);
    await c?.close();
    await svc?.stop('SIGTERM').catch(() => undefined);
    await api?.close();
    await host?.close();
    unmountUnder(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('an open claims the warm Sandbox whose Pod ran before it: exec, files, the injected environment (in no stored object), the NetworkPolicy selecting the claimed Pod', async () => {
    const [warm] = poolSandboxes();
    const warmName = warm!.metadata.name;
    const podUid = get('pods', warmName)!.metadata.uid;
    const ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'kwp-open-1', environmentId: envId, confirmEnvironmentInjection: true })).workspaceId as string;
    open.push(ws);
    const name = objectName(ws);
    const st = await ok('workspace_status', { workspaceId: ws });
    expect(st).toMatchObject({ sandboxState: 'running', sandboxKind: 'kubernetes-sandbox', sandboxObject: { apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox', namespace: NS, name: warmName, pod: warmName } });
    expect(get('pods', warmName)!.metadata.uid).toBe(podUid);
    expect(get('sandboxclaims', name)!.spec).toMatchObject({ warmPoolRef: { name: 'atelier-workspace' } });
    // The clone and the files are on the claim of the Sandbox's volume claim template.
    expect(get('persistentvolumeclaims', `data-${warmName}`)).toBeDefined();
    expect(get('persistentvolumeclaims', `data-${name}`)).toBeUndefined();
    expect(get('persistentvolumeclaims', name)).toBeUndefined();
    const r = await ok('exec_run', { workspaceId: ws, command: 'echo "plain=$PLAIN_VAR token=$API_TOKEN"; echo -n "$API_TOKEN" | wc -c; head -1 README.md' });
    expect(r.stdout).toBe(`plain=hello-warm token=[redacted:API_TOKEN]\n${SECRET.length}\n# demo\n`);
    await ok('files_write', { workspaceId: ws, path: 'notes/warm.txt', content: 'written to a warm pod\n' });
    expect((await ok('files_read', { workspaceId: ws, path: 'notes/warm.txt' })).content).toBe('written to a warm pod\n');
    for (const res of ['pods', 'sandboxes', 'sandboxclaims', 'sandboxtemplates', 'persistentvolumeclaims', 'networkpolicies']) expect(JSON.stringify(api.store.list(res, NS)), res).not.toContain(SECRET);
    const policy = get('networkpolicies', name)!.spec as { podSelector: { matchLabels: Record<string, string> }; ingress: unknown[]; egress: unknown[] };
    expect(policy).toMatchObject({ ingress: [], egress: [] });
    const selected = (api.store.list('pods', NS) as Obj[]).filter((p) => Object.entries(policy.podSelector.matchLabels).every(([k, v]) => p.metadata.labels?.[k] === v));
    expect(selected.map((p) => p.metadata.name)).toEqual([warmName]);
    expect(await claimGauge()).toEqual(['atelier_workspace_sandbox_claims{launch="warm"} 1', 'atelier_workspace_sandbox_claims{launch="cold"} 0']);
    // The pool makes a new warm Sandbox for the next open.
    await until(() => (poolSandboxes().length === 1 && poolSandboxes()[0]!.metadata.name !== warmName ? true : undefined), 'the pool replenished');
  }, 240_000);

  it('a runner killed outright reattaches to the claimed Sandbox (found through its claim); the environment is still there', async () => {
    const ws = open[0]!;
    const st0 = await ok('workspace_status', { workspaceId: ws });
    const uid = get('pods', st0.sandboxObject.pod)!.metadata.uid;
    await c.close();
    await svc.stop('SIGKILL');
    const token = svc.token;
    svc = { ...(await startService({ dataDir, args })), token };
    c = await connectV2(svc);
    const st = await ok('workspace_status', { workspaceId: ws });
    expect(st).toMatchObject({ sandboxState: 'running', sandboxObject: { name: st0.sandboxObject.name, pod: st0.sandboxObject.pod } });
    expect(get('pods', st0.sandboxObject.pod)!.metadata.uid).toBe(uid);
    expect((await ok('exec_run', { workspaceId: ws, command: 'echo "$PLAIN_VAR"; cat notes/warm.txt' })).stdout).toBe('hello-warm\nwritten to a warm pod\n');
    expect(await claimGauge()).toContain('atelier_workspace_sandbox_claims{launch="warm"} 1');
  }, 240_000);

  it('an empty pool: the claim gets a cold Sandbox made from the template, and says so; close deletes each claim and its Sandbox', async () => {
    const pool = get('sandboxwarmpools', 'atelier-workspace')!;
    api.store.update('sandboxwarmpools', NS, 'atelier-workspace', { ...pool, spec: { ...pool.spec, replicas: 0 } });
    await until(() => (poolSandboxes().length === 0 ? true : undefined), 'the pool emptied');
    // An open with an environment (a plain one may take the service's spare sandbox, itself claimed from the pool ahead of time).
    const ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'kwp-open-2', environmentId: envId, confirmEnvironmentInjection: true })).workspaceId as string;
    open.push(ws);
    const name = objectName(ws);
    const sb = get('sandboxes', name)!;
    expect(sb.metadata.labels?.['agents.x-k8s.io/launch-type']).toBe('cold');
    expect(sb.metadata.ownerReferences?.[0]).toMatchObject({ kind: 'SandboxClaim', name });
    expect((await ok('exec_run', { workspaceId: ws, command: 'head -1 README.md; echo "$PLAIN_VAR"' })).stdout).toBe('# demo\nhello-warm\n');
    expect(await claimGauge()).toEqual(['atelier_workspace_sandbox_claims{launch="warm"} 1', 'atelier_workspace_sandbox_claims{launch="cold"} 1']);
    const first = (await ok('workspace_status', { workspaceId: open[0]! })).sandboxObject.name as string;
    for (const id of [...open]) {
      await ok('workspace_close', { workspaceId: id });
      open.splice(open.indexOf(id), 1);
    }
    for (const [res, n] of [['sandboxclaims', objectName(ws)], ['sandboxes', name], ['sandboxes', first], ['pods', first], ['persistentvolumeclaims', `data-${first}`], ['networkpolicies', name]] as const) expect(get(res, n), `${res}/${n}`).toBeUndefined();
    // What is left is at most the service's spare sandbox (a plain open's, made ahead of time): its claim, not a workspace's.
    expect((api.store.list('sandboxclaims', NS) as Obj[]).length).toBeLessThanOrEqual(1);
    expect(await claimGauge()).toEqual(['atelier_workspace_sandbox_claims{launch="warm"} 0', 'atelier_workspace_sandbox_claims{launch="cold"} 0']);
  }, 240_000);
});
