/**
 * Which kind a workspace is under the Kubernetes executor (issue #34: "detect, and say which was
 * used"), through the real service (`bin/atelier serve --executor kubernetes`, official MCP
 * client) against the fixture API server (test/fixtures/kube-apiserver/): without the
 * agent-sandbox CRDs a workspace is a Pod with a claim, with them (`agentSandbox: true`) an
 * agent-sandbox Sandbox. Each says so in workspace_status (sandboxKind, sandboxObject naming the
 * object and its namespace) and in /metrics (atelier_workspace_sandboxes{executor,kind}), also
 * after a runner killed outright reattached to it (recover), and neither shows a runner path.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, startService, unmountUnder, type Service } from './harness.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import type { KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { startKubeTarget } from './kube-fixture.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';

const isRoot = process.getuid?.() === 0;

const CASES = [
  { kind: 'kubernetes-pod', agentSandbox: false, resource: 'pods', object: { apiVersion: 'v1', kind: 'Pod' }, metricKind: 'pod' },
  { kind: 'kubernetes-sandbox', agentSandbox: true, resource: 'sandboxes', object: { apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox' }, metricKind: 'sandbox' },
] as const;

async function metricLines(svc: Service): Promise<string[]> {
  const r = await fetch(`${svc.url}/metrics`, { headers: { authorization: `Bearer ${svc.token}` } });
  expect(r.status).toBe(200);
  return (await r.text()).split('\n').filter((l) => l.startsWith('atelier_workspace_sandboxes{'));
}

describe.skipIf(!isRoot).each(CASES)('a workspace says which kind it is: $kind', ({ kind, agentSandbox, resource, object, metricKind }) => {
  let host: GitHost;
  let api: KubeApiServer;
  let svc: Service;
  let c: Client;
  let ws = '';
  let args: string[] = [];
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-kk-'));

  async function ok(name: string, a: Record<string, unknown>): Promise<Record<string, unknown>> {
    const r = await call(c, name, a);
    if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
    return r.result;
  }

  beforeAll(async () => {
    host = await startGitHost();
    const kube = await startKubeTarget({ fixture: { agentSandbox } });
    api = kube.api!;
    await configFor(host, dataDir, { sandboxDiskMb: 0 });
    args = kube.args;
    svc = await startService({ dataDir, args });
    c = await connectV2(svc);
  }, 180_000);

  afterAll(async () => {
    if (ws && c) await call(c, 'workspace_close', { workspaceId: ws }).catch(() => undefined);
    await c?.close();
    await svc?.stop('SIGTERM').catch(() => undefined);
    await api?.close();
    await host?.close();
    unmountUnder(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('workspace_status and /metrics name the kind and the object', async () => {
    const repoUrl = (await host.createRepo(`approved/kind-${metricKind}`, REPO_FILES)).url;
    ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: `kk-open-${metricKind}` })).workspaceId as string;
    const name = objectName(ws);
    const st = await ok('workspace_status', { workspaceId: ws });
    expect(st).toMatchObject({ sandboxState: 'running', sandboxKind: kind, sandboxObject: { ...object, namespace: 'atelier', name, pod: name } });
    // The object is there, labelled with the workspace; the runner's own paths are not shown.
    expect(api.store.find(resource, 'atelier', name)?.metadata.labels?.['atelier.dev/workspace']).toBe(ws);
    if (agentSandbox) {
      expect((api.store.find('pods', 'atelier', name)?.metadata as { ownerReferences?: { kind: string }[] }).ownerReferences?.[0]?.kind).toBe('Sandbox');
      // Its files are in the Sandbox's claim; the clone (run beside the workspace's create) made no Pod-path claim.
      expect(api.store.find('persistentvolumeclaims', 'atelier', `data-${name}`)).toBeDefined();
      expect(api.store.find('persistentvolumeclaims', 'atelier', name)).toBeUndefined();
    }
    expect(JSON.stringify(st)).not.toContain(dataDir);
    expect(await metricLines(svc)).toEqual(
      expect.arrayContaining([
        'atelier_workspace_sandboxes{executor="bubblewrap",kind="bubblewrap"} 0',
        `atelier_workspace_sandboxes{executor="kubernetes",kind="${metricKind}"} 1`,
        `atelier_workspace_sandboxes{executor="kubernetes",kind="${metricKind === 'pod' ? 'sandbox' : 'pod'}"} 0`,
      ]),
    );
  }, 240_000);

  it('a runner killed outright reattaches and still says which kind', async () => {
    const uid = api.store.find('pods', 'atelier', objectName(ws))?.metadata.uid;
    await c.close();
    await svc.stop('SIGKILL');
    // The owner's token is in the data directory: the first runner's stays valid.
    const token = svc.token;
    svc = { ...(await startService({ dataDir, args })), token };
    c = await connectV2(svc);
    const st = await ok('workspace_status', { workspaceId: ws });
    expect(st).toMatchObject({ sandboxState: 'running', sandboxKind: kind, sandboxObject: { ...object, namespace: 'atelier', name: objectName(ws) } });
    // Recovered, not made again.
    expect(api.store.find('pods', 'atelier', objectName(ws))?.metadata.uid).toBe(uid);
    expect(await metricLines(svc)).toContain(`atelier_workspace_sandboxes{executor="kubernetes",kind="${metricKind}"} 1`);
  }, 240_000);

  it('after close: no sandbox of that kind is held', async () => {
    await ok('workspace_close', { workspaceId: ws });
    ws = '';
    expect(await metricLines(svc)).toContain(`atelier_workspace_sandboxes{executor="kubernetes",kind="${metricKind}"} 0`);
  }, 120_000);
});
