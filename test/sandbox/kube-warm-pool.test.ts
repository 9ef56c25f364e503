/**
 * The fixture API server's agent-sandbox extensions controllers (test/fixtures/kube-apiserver/
 * agent-sandbox.ts: SandboxWarmPool and SandboxClaim), checked with the real kubectl as any
 * client would see them (issue #34): a warm pool keeps its replicas of Sandboxes from its
 * template running, unowned by any claim; a claim adopts a Ready one (its additionalPodMetadata
 * labels reach the running Pod, the pool's label leaves it) or cold-starts one when none is
 * Ready; `kubectl get sandboxclaims` shows the Sandbox column; deleting the claim deletes its
 * Sandbox, Pod and claim. Needs root (each Pod is a bubblewrap sandbox) and a build.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sandboxManifest } from '../../src/sandbox/kubernetes/sandbox-objects.js';
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
