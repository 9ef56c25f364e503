/**
 * The Kubernetes executor driver with agent-sandbox installed (issue #34 item 1): the fixture API
 * server serves agents.x-k8s.io and runs a Sandbox controller (test/fixtures/kube-apiserver/
 * agent-sandbox.ts). A workspace is a Sandbox whose controller makes the Pod and the claim; stop
 * suspends it, create resumes it, a new driver recovers it, destroy deletes it with what it owns.
 * Previews (issue #33): relay() reaches a port a process in the Pod listens on, and nothing else.
 * kubectl sees the Sandbox. Needs root (each Pod is a bubblewrap sandbox) and a build.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubernetesExecutor } from '../../src/sandbox/kubernetes/index.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';
import { claimManifest } from '../../src/sandbox/kubernetes/manifests.js';
import type { SandboxHandle, SandboxSpec } from '../../src/sandbox/executor.js';
import { startKubeApiServer, type KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { nameHash, NAME_HASH_LABEL } from '../fixtures/kube-apiserver/agent-sandbox.js';
import { assertDaemonBuilt, isRoot, kubectl, until } from './helpers.js';

const LIMITS = { memoryBytes: 512 * 1024 * 1024, pidsMax: 256, cpuQuotaPercent: 100 };
type Obj = { metadata: { name: string; uid: string; labels?: Record<string, string>; ownerReferences?: { kind: string; name: string; uid: string; controller?: boolean }[] }; spec: Record<string, unknown>; status?: { conditions?: { type: string; status: string; reason: string }[] } };

/** An HTTP/1.0 GET through a relayed socket; the whole answer. */
async function httpGet(sock: Socket): Promise<string> {
  const chunks: Buffer[] = [];
  sock.on('data', (d: Buffer) => chunks.push(d));
  sock.resume();
  sock.write('GET / HTTP/1.0\r\nHost: preview\r\n\r\n');
  await new Promise((resolve) => sock.on('close', resolve));
  return Buffer.concat(chunks).toString();
}

describe.skipIf(!isRoot)('kubernetes executor driver with agent-sandbox (fixture API server)', () => {
  let api: KubeApiServer;
  let base: string;
  let ex: KubernetesExecutor;
  let spec: SandboxSpec;
  let h: SandboxHandle;
  let sandboxUid: string;
  const notes: string[] = [];
  const name = objectName('ws_SbxTest1');
  const driver = (): KubernetesExecutor =>
    new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'default', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run') }, (m) => notes.push(m));

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer({ agentSandbox: true });
    base = mkdtempSync('/tmp/atl-k8s-sbx-');
    ex = driver();
    spec = { id: 'ws_SbxTest1', rootDir: path.join(base, 'workspaces', 'ws_SbxTest1'), limits: LIMITS, network: 'none', env: { PROJECT: 'sandboxed' } };
  });
  afterAll(async () => {
    await ex?.close();
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('create makes a Sandbox (pod template and volume claim template of the Pod path); its controller makes the Pod and claim; says so', async () => {
    h = await ex.create(spec);
    expect(h).toMatchObject({ id: spec.id, pid: -1 });
    // Says which kind it is (workspace_status, /metrics).
    expect(h.placement).toEqual({ kind: 'kubernetes-sandbox', apiVersion: 'agents.x-k8s.io/v1beta1', objectKind: 'Sandbox', namespace: 'default', name, pod: name });
    expect(notes.join('\n')).toContain('workspaces are agent-sandbox Sandbox objects (agents.x-k8s.io/v1beta1)');
    const sb = api.store.get('sandboxes', 'default', name) as unknown as Obj;
    sandboxUid = sb.metadata.uid;
    expect(sb.metadata.labels).toMatchObject({ 'atelier.dev/workspace': spec.id, 'app.kubernetes.io/managed-by': 'atelier' });
    expect(sb.spec).toMatchObject({ operatingMode: 'Running', volumeClaimTemplates: [{ metadata: { name: 'data' }, spec: { accessModes: ['ReadWriteOnce'] } }] });
    const tmpl = sb.spec.podTemplate as { spec: { securityContext: unknown; automountServiceAccountToken: boolean; containers: { securityContext: unknown; resources: { limits: unknown } }[] } };
    expect(tmpl.spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: 'RuntimeDefault' } });
    expect(tmpl.spec.automountServiceAccountToken).toBe(false);
    expect(tmpl.spec.containers[0]!.securityContext).toMatchObject({ allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } });
    expect(tmpl.spec.containers[0]!.resources.limits).toMatchObject({ memory: String(LIMITS.memoryBytes), cpu: '1000m' });
    // What the controller made: owned by the Sandbox, tracked by its name hash.
    const pod = api.store.get('pods', 'default', name) as unknown as Obj;
    expect(pod.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: 'Sandbox', name, uid: sandboxUid, controller: true })]);
    expect(pod.metadata.labels).toMatchObject({ [NAME_HASH_LABEL]: nameHash(name), 'atelier.dev/policy': name, 'atelier.dev/workspace': spec.id });
    const claim = api.store.get('persistentvolumeclaims', 'default', `data-${name}`) as unknown as Obj;
    expect(claim.metadata.ownerReferences?.[0]).toMatchObject({ kind: 'Sandbox', uid: sandboxUid });
    expect(api.store.find('persistentvolumeclaims', 'default', name)).toBeUndefined();
    // The deny-all policy selects the Pod through its label.
    expect(api.store.get('networkpolicies', 'default', name).spec).toMatchObject({ podSelector: { matchLabels: { 'atelier.dev/policy': name } }, ingress: [], egress: [] });
    await until(() => ((api.store.get('sandboxes', 'default', name) as unknown as Obj).status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True' ? true : undefined), 'Ready=True');
  });

  it('exec and daemon requests reach the Sandbox Pod through the relay as on the Pod path', async () => {
    const r = await ex.exec(h, { command: 'echo $PROJECT $(id -u) $(pwd)' });
    expect(r).toMatchObject({ exitCode: 0, stdout: 'sandboxed 1000 /workspace\n' });
    await ex.request(h, 'fs.write', { path: 'kept.txt', content: 'kept across suspend\n' } as never);
  });

  it('kubectl get sandboxes lists it, with its Ready condition', async () => {
    const list = await kubectl(api.kubeconfig, ['get', 'sandboxes', '-o', 'name']);
    expect(list.stdout.trim(), list.stderr).toBe(`sandbox.agents.x-k8s.io/${name}`);
    const ready = await kubectl(api.kubeconfig, ['get', 'sandbox', name, '-o', `jsonpath={.status.conditions[?(@.type=="Ready")].reason}`]);
    expect(ready.stdout).toBe('DependenciesReady');
    const byLabel = await kubectl(api.kubeconfig, ['get', 'sandboxes', '-l', `atelier.dev/workspace=${spec.id}`, '-o', 'jsonpath={.items[*].spec.volumeClaimTemplates[0].metadata.name}']);
    expect(byLabel.stdout).toBe('data');
  });

  it('deploy/kubernetes/agent-sandbox.yaml names kinds the server serves (kubectl create)', async () => {
    const manifest = new URL('../../deploy/kubernetes/agent-sandbox.yaml', import.meta.url).pathname;
    const r = await kubectl(api.kubeconfig, ['create', '--validate=false', '-f', manifest]);
    expect(r.stdout, r.stderr).toContain('sandboxtemplate.extensions.agents.x-k8s.io/atelier-workspace created');
    expect(r.stdout).toContain('sandboxwarmpool.extensions.agents.x-k8s.io/atelier-workspace created');
    expect((await kubectl(api.kubeconfig, ['get', 'swp', '-n', 'atelier', '-o', 'name'])).stdout.trim()).toBe('sandboxwarmpool.extensions.agents.x-k8s.io/atelier-workspace');
  });

  it('relay (preview URLs) reaches an HTTP server listening in the Pod, and no other port', async () => {
    await ex.exec(h, { command: `nohup node -e "require('http').createServer((q,s)=>s.end('hello from the pod')).listen(8431,'127.0.0.1')" >/dev/null 2>&1 &`, keepBackground: true });
    const sock = await until(async () => ex.relay(h, 8431).catch(() => undefined), 'the server in the pod');
    expect(await httpGet(sock)).toMatch(/^HTTP\/1\.1 200 OK[\s\S]*\r\n\r\nhello from the pod$/);
    // Nothing listens on this port in the Pod.
    await expect(ex.relay(h, 8432)).rejects.toMatchObject({ code: 'FAILED_PRECONDITION' });
    await expect(ex.relay(h, 0)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    // Hostile: a port open on the runner's own loopback is not reached from the Pod.
    const host = createServer((s) => s.end('HOST SECRET'));
    await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
    try {
      await expect(ex.relay(h, (host.address() as AddressInfo).port)).rejects.toMatchObject({ code: 'FAILED_PRECONDITION' });
    } finally {
      host.close();
    }
  });

  it('managed-package releases (read-only directory mounts) reach a Sandbox: its pod template carries the init container and read-only mounts; the runner fills the Pod the controller makes, again when it resumes and after a runner gone before the copy', async () => {
    const rel = path.join(base, 'release');
    mkdirSync(path.join(rel, 'bin'), { recursive: true });
    writeFileSync(path.join(rel, 'bin', 'hello'), '#!/bin/sh\necho hello from the release\n', { mode: 0o755 });
    const target = '/opt/packages/npm/hello/node_modules';
    const other: SandboxSpec = { ...spec, id: 'ws_SbxRel1', rootDir: path.join(base, 'workspaces', 'ws_SbxRel1'), mounts: [{ source: rel, target, readOnly: true }] };
    const n = objectName(other.id);
    const check = `${target}/bin/hello; touch ${target}/x 2>&1 | grep -c Read-only; ls ${target}`;
    const ex1 = driver();
    let ex2: KubernetesExecutor | undefined;
    try {
      const h1 = await ex1.create(other);
      expect(h1.placement).toMatchObject({ kind: 'kubernetes-sandbox', name: n, pod: n });
      const tmpl = (api.store.get('sandboxes', 'default', n) as unknown as Obj).spec.podTemplate as { spec: { initContainers: { name: string }[]; volumes: unknown[]; containers: { volumeMounts: unknown[] }[] } };
      expect(tmpl.spec.initContainers.map((c) => c.name)).toEqual(['releases']);
      expect(tmpl.spec.volumes).toContainEqual({ name: 'releases', emptyDir: {} });
      expect(tmpl.spec.containers[0]!.volumeMounts).toContainEqual({ name: 'releases', mountPath: target, subPath: 'r0', readOnly: true });
      // The Pod is the controller's (owned by the Sandbox), with the template's init container.
      const pod = api.store.get('pods', 'default', n) as unknown as Obj & { spec: { initContainers?: { name: string }[] } };
      expect(pod.metadata.ownerReferences?.[0]).toMatchObject({ kind: 'Sandbox', name: n });
      expect(pod.spec.initContainers?.map((c) => c.name)).toEqual(['releases']);
      expect(ex1.copyStats.pods).toBe(1);
      expect((await ex1.exec(h1, { command: check })).stdout).toBe('hello from the release\n1\nbin\n');
      // Suspended and resumed: the new Pod is filled again.
      await ex1.stop(h1);
      expect(api.store.find('pods', 'default', n)).toBeUndefined();
      const h2 = await ex1.create(other);
      expect(ex1.copyStats.pods).toBe(2);
      expect((await ex1.exec(h2, { command: check })).stdout).toBe('hello from the release\n1\nbin\n');
      // A runner gone before it filled the Pod: the Sandbox runs again (as a resume the runner did
      // not finish would leave it), its new Pod waits in the init container; a new runner's recover
      // finds no running Pod, its create fills the waiting one.
      await ex1.stop(h2);
      await ex1.close();
      api.store.mutate('sandboxes', 'default', n, (o) => void ((o.spec as { operatingMode: string }).operatingMode = 'Running'));
      await until(() => ((api.store.find('pods', 'default', n)?.status as { initContainerStatuses?: { state?: { running?: unknown } }[] } | undefined)?.initContainerStatuses?.[0]?.state?.running ? true : undefined), 'the new Pod waiting in its init container');
      ex2 = driver();
      expect(await ex2.recover(other)).toBeNull();
      const h3 = await ex2.create(other);
      expect(ex2.copyStats.pods).toBe(1);
      expect((await ex2.exec(h3, { command: check })).stdout).toBe('hello from the release\n1\nbin\n');
      // A new runner recovering a running Sandbox copies nothing (its Pod was filled).
      await ex2.close();
      ex2 = driver();
      const h4 = await ex2.recover(other);
      expect(h4).not.toBeNull();
      expect(ex2.copyStats.pods).toBe(0);
      expect((await ex2.exec(h4!, { command: check })).stdout).toBe('hello from the release\n1\nbin\n');
      await ex2.destroy(h4!);
      expect(api.store.find('sandboxes', 'default', n)).toBeUndefined();
    } finally {
      await ex1.close();
      await ex2?.close();
    }
  });

  it('a short-lived Pod binding the workspace repo mounts the Sandbox\'s claim (data-<name>)', async () => {
    const r = await ex.runEphemeral({ argv: ['cat', '/workspace/kept.txt'], binds: [{ source: path.join(spec.rootDir, 'repo'), target: '/workspace' }], limits: LIMITS, network: 'none', cwd: '/workspace' });
    expect(r).toMatchObject({ exitCode: 0, stdout: 'kept across suspend\n' });
  });

  it('a runner restart: a new driver recovers the running Sandbox', async () => {
    await ex.close();
    ex = driver();
    const again = await ex.recover(spec);
    expect(again).toEqual(h);
    expect((await ex.exec(again!, { command: 'cat kept.txt' })).stdout).toBe('kept across suspend\n');
  });

  it('stop suspends the Sandbox (Pod gone, claim kept); create resumes the same Sandbox with the files', async () => {
    await ex.stop(h);
    const sb = api.store.get('sandboxes', 'default', name) as unknown as Obj;
    expect(sb.spec.operatingMode).toBe('Suspended');
    expect(api.store.find('pods', 'default', name)).toBeUndefined();
    expect(api.store.find('persistentvolumeclaims', 'default', `data-${name}`)).toBeDefined();
    expect(await ex.alive(h)).toBe(false);
    expect(await ex.recover(spec)).toBeNull();
    await until(() => ((api.store.get('sandboxes', 'default', name) as unknown as Obj).status?.conditions?.find((c) => c.type === 'Suspended')?.status === 'True' ? true : undefined), 'Suspended=True');
    h = await ex.create(spec);
    const resumed = api.store.get('sandboxes', 'default', name) as unknown as Obj;
    expect(resumed.metadata.uid).toBe(sandboxUid);
    expect(resumed.spec.operatingMode).toBe('Running');
    expect((await ex.exec(h, { command: 'cat kept.txt' })).stdout).toBe('kept across suspend\n');
  });

  it('a Sandbox whose Pod ended (the daemon exited) gets a new Pod on create', async () => {
    await ex.close();
    // What the daemon's orphan grace does: the Pod ends Succeeded; the controller keeps it.
    await api.runtime.stop('default', name);
    api.store.mutate('pods', 'default', name, (o) => void (o.status = { phase: 'Succeeded' }));
    ex = driver();
    expect(await ex.recover(spec)).toBeNull();
    h = await ex.create(spec);
    expect((await ex.exec(h, { command: 'cat kept.txt' })).stdout).toBe('kept across suspend\n');
  });

  it('destroy deletes the Sandbox, and with it its Pod and claim, and the policy', async () => {
    await ex.destroy(h);
    for (const [r, n] of [['sandboxes', name], ['pods', name], ['persistentvolumeclaims', `data-${name}`], ['networkpolicies', name]] as const) {
      expect(api.store.find(r, 'default', n), `${r}/${n}`).toBeUndefined();
    }
    expect((await kubectl(api.kubeconfig, ['get', 'sandboxes', '-o', 'name'])).stdout).toBe('');
  });

  it('a workspace made on the Pod path before the CRDs were installed stays a Pod on its claim', async () => {
    const old = { ...spec, id: 'ws_SbxOld1', rootDir: path.join(base, 'workspaces', 'ws_SbxOld1') };
    const oldName = objectName(old.id);
    api.store.create('persistentvolumeclaims', 'default', { ...claimManifest(oldName, old.id, { namespace: 'default', workspaceImage: 'x', runDir: '/' }), status: { phase: 'Bound' } } as never);
    const oh = await ex.create(old);
    expect(oh.placement).toEqual({ kind: 'kubernetes-pod', apiVersion: 'v1', objectKind: 'Pod', namespace: 'default', name: oldName, pod: oldName });
    expect(api.store.find('sandboxes', 'default', oldName)).toBeUndefined();
    expect((api.store.get('pods', 'default', oldName) as unknown as Obj).metadata.ownerReferences).toBeUndefined();
    const relayed = await ex.exec(oh, { command: 'echo pod path' });
    expect(relayed.stdout).toBe('pod path\n');
    await ex.destroy(oh);
    expect(api.store.find('persistentvolumeclaims', 'default', oldName)).toBeUndefined();
  });

  it("a clone started before the workspace's own create (the service runs them side by side) waits for the Sandbox's claim: the workspace stays a Sandbox", async () => {
    const ex2 = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'default', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run2'), workspacesDir: path.join(base, 'workspaces') });
    const s2 = { ...spec, id: 'ws_SbxClone1', rootDir: path.join(base, 'workspaces', 'ws_SbxClone1') };
    const n2 = objectName(s2.id);
    try {
      const clone = ex2.runEphemeral({ argv: ['sh', '-c', 'echo cloned > /workspace/cloned.txt'], binds: [{ source: path.join(s2.rootDir, 'repo'), target: '/workspace' }], limits: LIMITS, network: 'none', cwd: '/workspace' });
      // It watches for the claim and makes none of its own (a Pod-path claim would make the workspace a Pod).
      await until(() => (api.openWatches('persistentvolumeclaims') > 0 || api.store.find('persistentvolumeclaims', 'default', n2) ? true : undefined), 'the clone watching for the claim');
      expect(api.store.find('persistentvolumeclaims', 'default', n2)).toBeUndefined();
      const h2 = await ex2.create(s2);
      expect(await clone).toMatchObject({ exitCode: 0 });
      expect(h2.placement).toMatchObject({ kind: 'kubernetes-sandbox', name: n2 });
      expect(api.store.find('persistentvolumeclaims', 'default', n2)).toBeUndefined();
      expect((await ex2.exec(h2, { command: 'cat cloned.txt' })).stdout).toBe('cloned\n');
      expect(api.openWatches()).toBe(0);
      await ex2.destroy(h2);
    } finally {
      await ex2.close();
    }
  });
});

describe.skipIf(!isRoot)('kubernetes executor driver with agent-sandbox v1alpha1 only (replicas)', () => {
  let api: KubeApiServer;
  let base: string;

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer({ agentSandbox: { versions: ['v1alpha1'] } });
    base = mkdtempSync('/tmp/atl-k8s-sbx1-');
  });
  afterAll(async () => {
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('uses v1alpha1 with replicas 1, stop sets replicas 0, destroy deletes it', async () => {
    const notes: string[] = [];
    const ex = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'default', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run') }, (m) => notes.push(m));
    const s: SandboxSpec = { id: 'ws_SbxAlpha', rootDir: path.join(base, 'ws'), limits: LIMITS, network: 'none' };
    const n = objectName(s.id);
    try {
      const h = await ex.create(s);
      expect(notes.join('\n')).toContain('(agents.x-k8s.io/v1alpha1)');
      const sb = api.store.get('sandboxes', 'default', n) as unknown as Obj & { apiVersion: string };
      expect(sb.apiVersion).toBe('agents.x-k8s.io/v1alpha1');
      expect(sb.spec.replicas).toBe(1);
      expect(sb.spec.operatingMode).toBeUndefined();
      expect(h.placement).toMatchObject({ kind: 'kubernetes-sandbox', apiVersion: 'agents.x-k8s.io/v1alpha1', objectKind: 'Sandbox' });
      expect((await ex.exec(h, { command: 'echo alpha' })).stdout).toBe('alpha\n');
      await ex.stop(h);
      expect((api.store.get('sandboxes', 'default', n) as unknown as Obj).spec.replicas).toBe(0);
      expect(api.store.find('pods', 'default', n)).toBeUndefined();
      await ex.destroy(h);
      expect(api.store.find('sandboxes', 'default', n)).toBeUndefined();
      expect(api.store.find('persistentvolumeclaims', 'default', `data-${n}`)).toBeUndefined();
    } finally {
      await ex.close();
    }
  });
});
