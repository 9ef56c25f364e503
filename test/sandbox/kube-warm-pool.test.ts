/**
 * The fixture API server's agent-sandbox extensions controllers (test/fixtures/kube-apiserver/
 * agent-sandbox.ts: SandboxWarmPool and SandboxClaim), checked with the real kubectl as any
 * client would see them (issue #34): a warm pool keeps its replicas of Sandboxes from its
 * template running, unowned by any claim; a claim adopts a Ready one (its additionalPodMetadata
 * labels reach the running Pod, the pool's label leaves it) or cold-starts one when none is
 * Ready; `kubectl get sandboxclaims` shows the Sandbox column; deleting the claim deletes its
 * Sandbox, Pod and claim. Needs root (each Pod is a bubblewrap sandbox) and a build.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubernetesExecutor, type KubernetesExecutorOptions } from '../../src/sandbox/kubernetes/index.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';
import { sandboxManifest } from '../../src/sandbox/kubernetes/sandbox-objects.js';
import type { SandboxSpec } from '../../src/sandbox/executor.js';
import { startKubeApiServer, type KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { CLAIM_SANDBOX_ANNOTATION, LAUNCH_TYPE_LABEL, POD_NAME_ANNOTATION, WARM_POOL_LABEL } from '../fixtures/kube-apiserver/agent-sandbox.js';
import type { KubeObject } from '../fixtures/kube-apiserver/store.js';
import { assertDaemonBuilt, isRoot, kubectl, until } from './helpers.js';

type Obj = KubeObject & { metadata: KubeObject['metadata'] & { ownerReferences?: { kind: string; name: string; uid: string }[] }; spec: Record<string, unknown>; status?: Record<string, unknown> };
const NS = 'atelier';
const LIMITS = { memoryBytes: 512 * 1024 * 1024, pidsMax: 256, cpuQuotaPercent: 100 };

describe.skipIf(!isRoot)('fixture agent-sandbox: SandboxWarmPool and SandboxClaim controllers (kubectl)', () => {
  let api: KubeApiServer;
  let base: string;
  const k = (args: string[], input?: string) => kubectl(api.kubeconfig, ['-n', NS, ...args], input);
  const get = (resource: string, name: string) => api.store.find(resource, NS, name) as Obj | undefined;
  const poolSandboxes = () => (api.store.list('sandboxes', NS) as Obj[]).filter((s) => s.metadata.ownerReferences?.[0]?.kind === 'SandboxWarmPool');
  const claimBody = (name: string, policy: string) =>
    JSON.stringify({ apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxClaim', metadata: { name, labels: { 'atelier.dev/workspace': name } }, spec: { warmPoolRef: { name: 'warm' }, additionalPodMetadata: { labels: { 'atelier.dev/policy': policy, 'atelier.dev/workspace': name } } } });

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer({ agentSandbox: true });
    base = mkdtempSync('/tmp/atl-k8s-swp-');
    // The template: the daemon Pod (no per-workspace environment) and the claim template `data`.
    const sb = sandboxManifest({ name: 'tmpl', id: 'warm-template', version: 'v1beta1', limits: LIMITS, o: { namespace: NS, workspaceImage: 'atelier-workspace:test', runDir: base } });
    const podTemplate = sb.spec.podTemplate as { metadata: { labels: Record<string, string> } };
    delete podTemplate.metadata.labels['atelier.dev/policy'];
    delete podTemplate.metadata.labels['atelier.dev/workspace'];
    const template = { apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxTemplate', metadata: { name: 'warm' }, spec: { podTemplate, volumeClaimTemplates: sb.spec.volumeClaimTemplates } };
    const pool = { apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxWarmPool', metadata: { name: 'warm' }, spec: { replicas: 1, sandboxTemplateRef: { name: 'warm' } } };
    const r = await k(['create', '--validate=false', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [template, pool] }));
    expect(r.stdout, r.stderr).toContain('sandboxwarmpool.extensions.agents.x-k8s.io/warm created');
  });
  afterAll(async () => {
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('the pool keeps its replicas Ready, owned by the pool and labelled as warm (kubectl get swp shows Ready and Desired)', async () => {
    await until(async () => ((await k(['get', 'swp', 'warm', '--no-headers'])).stdout.match(/^warm\s+1\s+1\s/) ? true : undefined), 'the pool Ready 1 of 1');
    const [sb] = poolSandboxes();
    expect(sb!.metadata.name).toMatch(/^warm-[a-z0-9]{5}$/);
    expect(sb!.metadata.labels?.[WARM_POOL_LABEL]).toMatch(/^[0-9a-f]{8}$/);
    const pod = get('pods', sb!.metadata.name)!;
    expect(pod.metadata.labels?.[WARM_POOL_LABEL]).toBe(sb!.metadata.labels?.[WARM_POOL_LABEL]);
    expect(pod.metadata.labels?.['atelier.dev/policy']).toBeUndefined();
    expect(get('persistentvolumeclaims', `data-${sb!.metadata.name}`)).toBeDefined();
  });

  it('a claim adopts the Ready warm Sandbox: its labels reach the running Pod, the pool label leaves; kubectl get sandboxclaims shows the Sandbox; the pool replenishes', async () => {
    const [warm] = poolSandboxes();
    const podUid = get('pods', warm!.metadata.name)!.metadata.uid;
    expect((await k(['create', '--validate=false', '-f', '-'], claimBody('ws-one', 'atl-one'))).code).toBe(0);
    const table = await until(async () => {
      const r = await k(['get', 'sandboxclaims']);
      return r.stdout.includes(warm!.metadata.name) && /True/.test(r.stdout) ? r.stdout : undefined;
    }, 'the claim Ready with its Sandbox');
    expect(table.split('\n')[0]).toMatch(/^NAME\s+READY\s+SANDBOX\s+REASON\s+AGE$/);
    expect(table.split('\n')[1]).toMatch(new RegExp(`^ws-one\\s+True\\s+${warm!.metadata.name}\\s+SandboxReady\\s+\\d+s$`));
    const claim = get('sandboxclaims', 'ws-one')!;
    expect(claim.metadata.annotations?.[CLAIM_SANDBOX_ANNOTATION]).toBe(warm!.metadata.name);
    const sb = get('sandboxes', warm!.metadata.name)!;
    expect(sb.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: 'SandboxClaim', name: 'ws-one', uid: claim.metadata.uid })]);
    expect(sb.metadata.labels?.[WARM_POOL_LABEL]).toBeUndefined();
    expect(sb.metadata.labels?.[LAUNCH_TYPE_LABEL]).toBe('warm');
    expect(sb.metadata.annotations?.[POD_NAME_ANNOTATION]).toBe(warm!.metadata.name);
    // The same Pod (not restarted), now carrying the claim's labels and not the pool's.
    const pod = await until(() => {
      const p = get('pods', warm!.metadata.name);
      return p?.metadata.labels?.['atelier.dev/policy'] === 'atl-one' ? p : undefined;
    }, 'the claim labels on the Pod');
    expect(pod.metadata.uid).toBe(podUid);
    expect(pod.metadata.labels?.[WARM_POOL_LABEL]).toBeUndefined();
    expect(pod.metadata.labels?.['atelier.dev/workspace']).toBe('ws-one');
    const byLabel = await k(['get', 'pods', '-l', 'atelier.dev/policy=atl-one', '-o', 'name']);
    expect(byLabel.stdout.trim()).toBe(`pod/${warm!.metadata.name}`);
    // The pool makes a new warm one.
    await until(() => (poolSandboxes().length === 1 && poolSandboxes()[0]!.metadata.name !== warm!.metadata.name ? true : undefined), 'a new warm Sandbox');
  });

  it('with no Ready warm Sandbox a claim cold-starts one named as the claim; deleting a claim deletes its Sandbox, Pod and volume claim', async () => {
    const pool = get('sandboxwarmpools', 'warm')!;
    api.store.update('sandboxwarmpools', NS, 'warm', { ...pool, spec: { ...pool.spec, replicas: 0 } });
    await until(() => (poolSandboxes().length === 0 ? true : undefined), 'the pool emptied');
    expect((await k(['create', '--validate=false', '-f', '-'], claimBody('ws-two', 'atl-two'))).code).toBe(0);
    await until(() => ((get('sandboxclaims', 'ws-two')?.status as { conditions?: { status: string }[] } | undefined)?.conditions?.[0]?.status === 'True' ? true : undefined), 'the cold claim Ready');
    const sb = get('sandboxes', 'ws-two')!;
    expect(sb.metadata.labels?.[LAUNCH_TYPE_LABEL]).toBe('cold');
    expect(sb.metadata.ownerReferences?.[0]).toMatchObject({ kind: 'SandboxClaim', name: 'ws-two' });
    expect(get('pods', 'ws-two')!.metadata.labels?.['atelier.dev/policy']).toBe('atl-two');
    const adopted = get('sandboxclaims', 'ws-one')!.metadata.annotations![CLAIM_SANDBOX_ANNOTATION]!;
    for (const [claim, sbName] of [['ws-one', adopted], ['ws-two', 'ws-two']] as const) {
      expect((await k(['delete', 'sandboxclaim', claim])).code).toBe(0);
      for (const [r, n] of [['sandboxes', sbName], ['pods', sbName], ['persistentvolumeclaims', `data-${sbName}`]] as const) expect(get(r, n), `${r}/${n}`).toBeUndefined();
    }
    expect((await k(['get', 'sandboxclaims', '-o', 'name'])).stdout).toBe('');
  });
});

describe.skipIf(!isRoot)('kubernetes executor driver claiming workspaces from a SandboxWarmPool (fixture API server)', () => {
  let api: KubeApiServer;
  let base: string;
  const notes: string[] = [];
  const drivers: KubernetesExecutor[] = [];
  const driver = (o: Partial<KubernetesExecutorOptions> = {}): KubernetesExecutor => {
    const ex = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: NS, workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run'), warmPool: 'warm', claimWaitMs: 3_000, ...o }, (m) => notes.push(m));
    drivers.push(ex);
    return ex;
  };
  const get = (resource: string, name: string) => api.store.find(resource, NS, name) as Obj | undefined;
  const poolSandboxes = () => (api.store.list('sandboxes', NS) as Obj[]).filter((s) => s.metadata.ownerReferences?.[0]?.kind === 'SandboxWarmPool');
  const setReplicas = (n: number) => {
    const pool = get('sandboxwarmpools', 'warm')!;
    api.store.update('sandboxwarmpools', NS, 'warm', { ...pool, spec: { ...pool.spec, replicas: n } });
  };
  const specOf = (id: string, extra: Partial<SandboxSpec> = {}): SandboxSpec => ({ id, rootDir: path.join(base, 'workspaces', id), limits: LIMITS, network: 'none', env: { PROJECT: `p-${id}`, OWNER_TOKEN: 'tok-s3cret' }, ...extra });

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer({ agentSandbox: true });
    base = mkdtempSync('/tmp/atl-k8s-claim-');
    const sb = sandboxManifest({ name: 'tmpl', id: 'warm-template', version: 'v1beta1', limits: LIMITS, o: { namespace: NS, workspaceImage: 'atelier-workspace:test', runDir: base } });
    const podTemplate = sb.spec.podTemplate as { metadata: { labels: Record<string, string> } };
    delete podTemplate.metadata.labels['atelier.dev/policy'];
    delete podTemplate.metadata.labels['atelier.dev/workspace'];
    api.store.create('sandboxtemplates', NS, { apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxTemplate', metadata: { name: 'warm' }, spec: { podTemplate, volumeClaimTemplates: sb.spec.volumeClaimTemplates } });
    api.store.create('sandboxwarmpools', NS, { apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxWarmPool', metadata: { name: 'warm' }, spec: { replicas: 1, sandboxTemplateRef: { name: 'warm' } } });
    await until(() => ((get('sandboxwarmpools', 'warm')?.status as { readyReplicas?: number } | undefined)?.readyReplicas === 1 ? true : undefined), 'the warm pool ready');
  });
  afterAll(async () => {
    for (const d of drivers) await d.close();
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('a workspace is claimed from the pool: the warm Pod (started before) with the policy label, its environment given after start and in no object, files on the template claim; recover, stop and resume, destroy', async () => {
    const ex = driver();
    const s = specOf('ws_Claim1');
    const n = objectName(s.id);
    const [warm] = poolSandboxes();
    const warmPod = get('pods', warm!.metadata.name)!;
    const h = await ex.create(s);
    expect(h.placement).toEqual({ kind: 'kubernetes-sandbox', apiVersion: 'agents.x-k8s.io/v1beta1', objectKind: 'Sandbox', namespace: NS, name: warm!.metadata.name, pod: warm!.metadata.name, claim: { name: n, pool: 'warm', launch: 'warm' } });
    expect(notes.join('\n')).toContain(`workspace ${s.id}: claimed the Sandbox ${warm!.metadata.name} from the warm pool warm (warm`);
    expect(ex.claimStats).toMatchObject({ warm: 1, cold: 0, own: 0 });
    // The same Pod as before the open, now selected by the workspace's deny-all policy.
    const pod = get('pods', warm!.metadata.name)!;
    expect(pod.metadata.uid).toBe(warmPod.metadata.uid);
    const policy = get('networkpolicies', n)!.spec as { podSelector: { matchLabels: Record<string, string> } };
    for (const [k, v] of Object.entries(policy.podSelector.matchLabels)) expect(pod.metadata.labels?.[k], k).toBe(v);
    const claim = get('sandboxclaims', n)!;
    expect(claim.metadata.labels?.['atelier.dev/workspace']).toBe(s.id);
    expect(claim.spec).toMatchObject({ warmPoolRef: { name: 'warm' }, additionalPodMetadata: { labels: { 'atelier.dev/policy': n, 'atelier.dev/workspace': s.id } } });
    // The environment reached the daemon after start, and no stored object carries it.
    expect((await ex.exec(h, { command: 'echo "$PROJECT $OWNER_TOKEN $HTTPS_PROXY"' })).stdout).toBe('p-ws_Claim1 tok-s3cret http://127.0.0.1:3128\n');
    for (const r of ['pods', 'sandboxes', 'sandboxclaims', 'sandboxtemplates']) expect(JSON.stringify(api.store.list(r, NS))).not.toContain('tok-s3cret');
    // Files: the claim of the template's volume claim template, also from a short-lived Pod binding the workspace.
    await ex.request(h, 'fs.write', { path: 'kept.txt', content: 'kept\n' } as never);
    const r = await ex.runEphemeral({ argv: ['cat', '/workspace/kept.txt'], binds: [{ source: path.join(s.rootDir, 'repo'), target: '/workspace' }], limits: LIMITS, network: 'none', cwd: '/workspace' });
    expect(r).toMatchObject({ exitCode: 0, stdout: 'kept\n' });
    // A new runner finds it through its claim (by the workspace's name) and reattaches.
    await ex.close();
    const ex2 = driver();
    const again = await ex2.recover(s);
    expect(again).toEqual(h);
    expect((await ex2.exec(again!, { command: 'echo "$PROJECT"; cat kept.txt' })).stdout).toBe('p-ws_Claim1\nkept\n');
    // Stop suspends the claimed Sandbox; create resumes it, its new Pod gets the environment again.
    await ex2.stop(again!);
    expect((get('sandboxes', warm!.metadata.name)!.spec as { operatingMode: string }).operatingMode).toBe('Suspended');
    expect(get('pods', warm!.metadata.name)).toBeUndefined();
    const resumed = await ex2.create({ ...s, env: { PROJECT: 'after-resume' } });
    expect(resumed.placement?.claim).toEqual({ name: n, pool: 'warm', launch: 'warm' });
    expect((await ex2.exec(resumed, { command: 'echo "$PROJECT"; cat kept.txt' })).stdout).toBe('after-resume\nkept\n');
    expect(get('pods', warm!.metadata.name)!.metadata.labels?.['atelier.dev/policy']).toBe(n);
    await ex2.destroy(resumed);
    for (const [res, name] of [['sandboxclaims', n], ['sandboxes', warm!.metadata.name], ['pods', warm!.metadata.name], ['persistentvolumeclaims', `data-${warm!.metadata.name}`], ['networkpolicies', n]] as const) expect(get(res, name), `${res}/${name}`).toBeUndefined();
  });

  it('falls back: an empty pool gives a cold claim; a workspace with releases, settings the template does not give, or a pool that names nothing get a Sandbox of their own', async () => {
    setReplicas(0);
    await until(() => (poolSandboxes().length === 0 ? true : undefined), 'the pool emptied');
    const ex = driver();
    const cold = specOf('ws_Claim2');
    const hc = await ex.create(cold);
    expect(hc.placement?.claim).toEqual({ name: objectName(cold.id), pool: 'warm', launch: 'cold' });
    expect((await ex.exec(hc, { command: 'echo "$PROJECT"' })).stdout).toBe('p-ws_Claim2\n');
    await ex.destroy(hc);
    // Releases: copied in before the daemon starts, which a warm Pod cannot: no claim is made.
    const rel = path.join(base, 'release');
    mkdirSync(rel, { recursive: true });
    writeFileSync(path.join(rel, 'hello'), 'hi\n');
    const withRel = specOf('ws_Claim3', { mounts: [{ source: rel, target: '/opt/packages/npm/x/node_modules', readOnly: true }] });
    const hr = await ex.create(withRel);
    expect(hr.placement).toMatchObject({ name: objectName(withRel.id), pod: objectName(withRel.id) });
    expect(hr.placement?.claim).toBeUndefined();
    expect(get('sandboxclaims', objectName(withRel.id))).toBeUndefined();
    expect(notes.join('\n')).toContain(`workspace ${withRel.id}: a Sandbox of its own (cold), not claimed from the warm pool: it has package releases`);
    await ex.destroy(hr);
    // Limits the template does not give: the claimed Sandbox is given back (claim deleted), the workspace gets its own.
    // A clone the service starts before the workspace's create waits for create's answer: it lands in the workspace's own Sandbox, not the one given back.
    const bigger = specOf('ws_Claim4', { limits: { ...LIMITS, memoryBytes: LIMITS.memoryBytes * 2 } });
    const exClone = driver({ workspacesDir: path.join(base, 'workspaces') });
    const clone = exClone.runEphemeral({ argv: ['sh', '-c', 'echo cloned > /workspace/cloned.txt'], binds: [{ source: path.join(bigger.rootDir, 'repo'), target: '/workspace' }], limits: LIMITS, network: 'none', cwd: '/workspace' });
    await until(() => (api.openWatches('sandboxclaims') > 0 ? true : undefined), 'the clone watching for the claim');
    const hb = await exClone.create(bigger);
    expect(await clone).toMatchObject({ exitCode: 0 });
    expect((await exClone.exec(hb, { command: 'cat cloned.txt' })).stdout).toBe('cloned\n');
    expect(hb.placement?.claim).toBeUndefined();
    expect(hb.placement?.name).toBe(objectName(bigger.id));
    expect(get('sandboxclaims', objectName(bigger.id))).toBeUndefined();
    expect(notes.join('\n')).toMatch(new RegExp(`workspace ${bigger.id}: a Sandbox of its own \\(cold\\), not claimed from the warm pool warm: the Sandbox \\S+ it got is not this workspace's: its memory limit ${LIMITS.memoryBytes} is not the workspace's ${LIMITS.memoryBytes * 2}`));
    expect(JSON.parse((await exClone.exec(hb, { command: 'echo "{\\"p\\":\\"$PROJECT\\"}"' })).stdout)).toEqual({ p: 'p-ws_Claim4' });
    await exClone.destroy(hb);
    // A pool that does not exist: the claim names nothing within claimWaitMs; deleted, the workspace gets its own.
    const exNone = driver({ warmPool: 'no-such-pool', claimWaitMs: 500 });
    const none = specOf('ws_Claim5');
    const hn = await exNone.create(none);
    expect(hn.placement?.claim).toBeUndefined();
    expect(get('sandboxclaims', objectName(none.id))).toBeUndefined();
    expect(notes.join('\n')).toMatch(/workspace ws_Claim5: a Sandbox of its own \(cold\), not claimed from the warm pool no-such-pool: sandboxclaim \S+ named no Sandbox within 500 ms \(Ready False, WarmPoolNotFound/);
    await exNone.destroy(hn);
    // A Role without sandboxclaims (an older rbac.yaml): the open still succeeds, on a Sandbox of its own, and the log says why.
    api.forbidden.add('POST sandboxclaims');
    try {
      const denied = specOf('ws_Claim6');
      const hd = await ex.create(denied);
      expect(hd.placement?.claim).toBeUndefined();
      expect(hd.placement?.name).toBe(objectName(denied.id));
      expect((await ex.exec(hd, { command: 'echo "$PROJECT"' })).stdout).toBe('p-ws_Claim6\n');
      expect(notes.join('\n')).toContain(`workspace ws_Claim6: a Sandbox of its own (cold), not claimed from the warm pool warm: the runner may not create sandboxclaims in ${NS} (403;`);
      await ex.destroy(hd);
    } finally {
      api.forbidden.delete('POST sandboxclaims');
    }
    expect(api.store.list('sandboxes', NS)).toEqual([]);
  });
});
