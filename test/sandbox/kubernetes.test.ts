/**
 * The Kubernetes executor driver (src/sandbox/kubernetes/) against the fixture API server
 * (test/fixtures/kube-apiserver/): create a workspace Pod with its claim and NetworkPolicy, exec
 * and daemon requests through the exec-stream relay, stats from the metrics API, a runner
 * restart (a new driver) recovering it by name, a short-lived Pod on the workspace's claim,
 * refused host binds, stop and destroy. Needs root (each Pod is a bubblewrap sandbox) and a build.
 */
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createHash, randomBytes } from 'node:crypto';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubernetesExecutor } from '../../src/sandbox/kubernetes/index.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';
import type { SandboxHandle, SandboxSpec } from '../../src/sandbox/executor.js';
import { startKubeApiServer, type KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { assertDaemonBuilt, isRoot } from './helpers.js';

const LIMITS = { memoryBytes: 512 * 1024 * 1024, pidsMax: 256, cpuQuotaPercent: 100 };

describe.skipIf(!isRoot)('kubernetes executor driver (fixture API server)', () => {
  let api: KubeApiServer;
  let base: string;
  let ex: KubernetesExecutor;
  let spec: SandboxSpec;
  let h: SandboxHandle;
  const notes: string[] = [];
  const driver = (): KubernetesExecutor =>
    new KubernetesExecutor(
      { kubeconfig: api.kubeconfig, namespace: 'atelier', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run') },
      (m) => notes.push(m),
    );

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer();
    base = mkdtempSync('/tmp/atl-k8d-');
    ex = driver();
    spec = { id: 'ws_K8sTest1', rootDir: path.join(base, 'workspaces', 'ws_K8sTest1'), limits: LIMITS, network: 'none', env: { PROJECT: 'atelier' } };
  });
  afterAll(async () => {
    await ex?.close();
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('create: a claim, a deny-all NetworkPolicy and a Pod labelled with the workspace; says what it used', async () => {
    h = await ex.create(spec);
    const name = objectName(spec.id);
    expect(h).toEqual({ id: spec.id, socketPath: expect.stringContaining(path.join(base, 'run')), pid: -1, placement: { kind: 'kubernetes-pod', apiVersion: 'v1', objectKind: 'Pod', namespace: 'atelier', name, pod: name } });
    expect(lstatSync(h.socketPath).mode & 0o777).toBe(0o600);
    const pod = api.store.get('pods', 'atelier', name);
    expect(pod.metadata.labels).toMatchObject({ 'atelier.dev/workspace': 'ws_K8sTest1', 'app.kubernetes.io/managed-by': 'atelier' });
    expect(api.store.get('persistentvolumeclaims', 'atelier', name).status).toMatchObject({ phase: 'Bound' });
    const pol = api.store.get('networkpolicies', 'atelier', name) as { spec: { egress: unknown[]; ingress: unknown[]; policyTypes: string[] } };
    expect(pol.spec).toMatchObject({ policyTypes: ['Ingress', 'Egress'], ingress: [], egress: [] });
    expect(notes.join('\n')).toContain('workspaces are Pods with a PersistentVolumeClaim (no agent-sandbox CRDs');
  });

  it('exec runs in the Pod through the daemon: output, exit code, streaming, the spec environment', async () => {
    const chunks: string[] = [];
    const r = await ex.exec(h, { command: 'echo $PROJECT $(id -u) $(pwd); echo e >&2; exit 4' }, (_s, c) => chunks.push(c.toString()));
    expect(r).toMatchObject({ exitCode: 4, stdout: 'atelier 1000 /workspace\n', stderr: 'e\n' });
    expect(chunks.join('')).toContain('atelier 1000');
    const t = await ex.exec(h, { argv: ['sleep', '30'], timeoutMs: 300 });
    expect(t.timedOut).toBe(true);
  });

  it('daemon requests (files, grep) go through the same relay', async () => {
    await ex.request(h, 'fs.write', { path: 'src/a.txt', content: 'needle here\n' } as never);
    const read = (await ex.request(h, 'fs.read', { path: 'src/a.txt' } as never)) as { content?: string };
    expect(JSON.stringify(read)).toContain('needle here');
    const grep = await ex.request(h, 'search.grep', { pattern: 'needle' } as never);
    expect(JSON.stringify(grep)).toContain('src/a.txt');
  });

  it('stats come from the metrics API', async () => {
    const s = await ex.stats(h);
    expect(s.memoryBytes).toBeGreaterThan(0);
    expect(s.pids).toBe(0);
  });

  it('setNetworkPolicy: the policy stays deny-all under dependency-access (the proxy is the runner\'s, through a tunnel: kube-egress.test.ts); its annotation says the network', async () => {
    // No proxy listens on this socket: the tunnel opens all the same (it connects per connection).
    await ex.setNetworkPolicy(h, { proxySocket: path.join(base, 'no-proxy.sock') });
    const pol = () => api.store.get('networkpolicies', 'atelier', objectName(spec.id)) as { metadata: { annotations: Record<string, string> }; spec: { egress: unknown[]; ingress: unknown[] } };
    expect(pol().spec).toMatchObject({ egress: [], ingress: [] });
    expect(pol().metadata.annotations['atelier.dev/network']).toBe('proxy');
    expect(ex.proxyTunnel(spec.id)?.opens).toBe(1);
    await ex.setNetworkPolicy(h, 'none');
    expect(pol().spec.egress).toEqual([]);
    expect(pol().metadata.annotations['atelier.dev/network']).toBe('none');
    expect(ex.proxyTunnel(spec.id)).toBeUndefined();
  });

  it('a runner restart: a new driver recovers the running Pod by name, files intact; an unknown id recovers nothing', async () => {
    await ex.close();
    ex = driver();
    const again = await ex.recover(spec);
    expect(again).toEqual(h);
    const r = await ex.exec(again!, { command: 'cat src/a.txt' });
    expect(r.stdout).toBe('needle here\n');
    expect(await ex.recover({ ...spec, id: 'ws_neverCreated' })).toBeNull();
  });

  it('a short-lived Pod on the workspace claim sees its files; a host bind is refused by name', async () => {
    const r = await ex.runEphemeral({ argv: ['sh', '-c', 'cat /workspace/src/a.txt && echo made > /workspace/from-ephemeral'], binds: [{ source: path.join(spec.rootDir, 'repo'), target: '/workspace' }], limits: LIMITS, network: 'none', cwd: '/workspace' });
    expect(r).toMatchObject({ exitCode: 0, stdout: 'needle here\n' });
    expect((await ex.exec(h, { command: 'cat from-ephemeral' })).stdout).toBe('made\n');
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
    await expect(ex.runEphemeral({ argv: ['true'], binds: [{ source: '/etc', target: '/workspace' }], limits: LIMITS, network: 'none' })).rejects.toMatchObject({ code: 'NOT_SUPPORTED', details: { field: 'binds', target: '/workspace' } });
    await expect(ex.runEphemeral({ argv: ['true'], binds: [{ source: path.join(spec.rootDir, 'repo'), target: '/home/user' }], limits: LIMITS, network: 'none' })).rejects.toMatchObject({ code: 'NOT_SUPPORTED' });
    // A socket directory (the credential broker's, an agent's control socket) never goes into a Pod.
    await expect(ex.runEphemeral({ argv: ['true'], binds: [{ source: path.join(spec.rootDir, 'repo'), target: '/workspace', sockets: true }], limits: LIMITS, network: 'none' })).rejects.toMatchObject({ code: 'NOT_SUPPORTED', details: { field: 'binds' } });
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
  });

  it('a collected directory (a build\'s): its contents go in, the tree it names comes back (40 MB intact, paced); over the limit it is refused as tree_refused', async () => {
    const work = path.join(base, 'build-work');
    mkdirSync(work);
    writeFileSync(path.join(work, 'input.txt'), 'from-the-runner\n');
    const cmd = 'cat input.txt && mkdir -p node_modules/a && head -c 40000000 /dev/zero > node_modules/a/big && ln -s / node_modules/a/root && echo made > node_modules/a/x';
    const r = await ex.runEphemeral({ command: cmd, binds: [{ source: work, target: '/workspace', collect: { name: 'node_modules', maxBytes: 64 * 1024 * 1024 } }], limits: LIMITS, network: 'none', cwd: '/workspace' });
    expect(r).toMatchObject({ exitCode: 0, stdout: 'from-the-runner\n' });
    expect(lstatSync(path.join(work, 'node_modules/a/big')).size).toBe(40_000_000);
    expect(readFileSync(path.join(work, 'node_modules/a/x'), 'utf8')).toBe('made\n');
    expect(readlinkSync(path.join(work, 'node_modules/a/root'))).toBe('/');
    const small = path.join(base, 'build-small');
    mkdirSync(small);
    await expect(
      ex.runEphemeral({ command: 'mkdir -p node_modules && head -c 3000000 /dev/zero > node_modules/big', binds: [{ source: small, target: '/workspace', collect: { name: 'node_modules', maxBytes: 1024 * 1024 } }], limits: LIMITS, network: 'none', cwd: '/workspace' }),
    ).rejects.toMatchObject({ code: 'FAILED_PRECONDITION', details: { reason: 'tree_refused' } });
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
  });

  it('stop keeps the claim (the files); create again finds them; destroy removes Pod, policy and claim', async () => {
    await ex.stop(h);
    expect(await ex.alive(h)).toBe(false);
    expect(api.store.find('persistentvolumeclaims', 'atelier', objectName(spec.id))).toBeDefined();
    h = await ex.create(spec);
    expect((await ex.exec(h, { command: 'cat src/a.txt' })).stdout).toBe('needle here\n');
    await ex.destroy(h);
    for (const r of ['pods', 'persistentvolumeclaims', 'networkpolicies']) expect(api.store.find(r, 'atelier', objectName(spec.id))).toBeUndefined();
  });

  it('refuses an id that is not a sandbox id, and mounts that are not read-only directories', async () => {
    await expect(ex.create({ ...spec, id: '../x' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(ex.create({ ...spec, mounts: [{ source: '/opt', target: '/opt/pkgs' }] })).rejects.toMatchObject({ code: 'NOT_SUPPORTED', details: { field: 'mounts', driver: 'kubernetes' } });
  });

  it('a read-only directory bind is copied into the Pod, read-only there; a link planted in it stays a link (never followed by the runner); a linked source, a reserved or overlapping target are refused', async () => {
    const rel = path.join(base, 'release');
    mkdirSync(path.join(rel, 'bin'), { recursive: true });
    writeFileSync(path.join(rel, 'bin', 'tool'), '#!/bin/sh\necho tool-ran\n', { mode: 0o755 });
    symlinkSync('/', path.join(rel, 'root-link'));
    symlinkSync('/etc/shadow', path.join(rel, 'shadow-link'));
    // 12 MiB: more than the copy keeps queued on its stream, arriving intact.
    const big = randomBytes(12 * 1024 * 1024);
    writeFileSync(path.join(rel, 'big.bin'), big);
    const sum = createHash('sha256').update(big).digest('hex');
    const r = await ex.runEphemeral({
      command: 'sha256sum /opt/packages/npm/t/big.bin | cut -c1-64; tool; readlink /opt/packages/npm/t/root-link /opt/packages/npm/t/shadow-link; cat /opt/packages/npm/t/shadow-link >/dev/null 2>&1 || echo no-shadow; touch /opt/packages/npm/t/x 2>&1 | grep -c Read-only',
      binds: [{ source: rel, target: '/opt/packages/npm/t', readOnly: true }],
      env: { PATH: '/opt/packages/npm/t/bin:/usr/bin:/bin' },
      limits: LIMITS,
      network: 'none',
      cwd: '/tmp',
    });
    expect(r).toMatchObject({ exitCode: 0, stdout: `${sum}\ntool-ran\n/\n/etc/shadow\nno-shadow\n1\n` });
    expect(ex.copyStats.pods).toBeGreaterThanOrEqual(1);
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
    // The source a link to a directory: not followed, refused.
    symlinkSync(rel, path.join(base, 'release-link'));
    await expect(ex.runEphemeral({ argv: ['true'], binds: [{ source: path.join(base, 'release-link'), target: '/opt/packages/npm/t', readOnly: true }], limits: LIMITS, network: 'none' })).rejects.toMatchObject({ code: 'NOT_SUPPORTED', details: { field: 'binds', driver: 'kubernetes' } });
    for (const target of ['/opt/atelier/daemon', '/etc/x', '/opt/packages/../atelier', '/']) {
      await expect(ex.runEphemeral({ argv: ['true'], binds: [{ source: rel, target, readOnly: true }], limits: LIMITS, network: 'none' }), target).rejects.toMatchObject({ code: 'NOT_SUPPORTED' });
    }
    await expect(
      ex.runEphemeral({ argv: ['true'], binds: [{ source: rel, target: '/opt/p', readOnly: true }, { source: rel, target: '/opt/p/q', readOnly: true }], limits: LIMITS, network: 'none' }),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'binds' } });
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
  });
});
