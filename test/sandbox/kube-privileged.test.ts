/**
 * Approved privileged commands on the Kubernetes driver against the fixture API server (issue
 * #34): the driver's privileged Pod (hostUsers: false, uid 0, a few capabilities) on the
 * workspace's claim, the refusal when the API server drops hostUsers, and the fixture's own
 * kubelet checked with kubectl (hostUsers shown, exec as uid 0, a uid 0 Pod without a user
 * namespace refused). Needs root (each Pod is a bubblewrap sandbox) and a build.
 */
import { lstatSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubernetesExecutor } from '../../src/sandbox/kubernetes/index.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';
import type { EphemeralSpec, SandboxHandle, SandboxSpec } from '../../src/sandbox/executor.js';
import { startKubeApiServer, type KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { assertDaemonBuilt, isRoot, kubectl as runKubectl, until } from './helpers.js';

const LIMITS = { memoryBytes: 512 * 1024 * 1024, pidsMax: 256, cpuQuotaPercent: 100 };

describe.skipIf(!isRoot)('privileged commands on the kubernetes driver (fixture API server)', () => {
  let api: KubeApiServer;
  let base: string;
  let ex: KubernetesExecutor;
  let spec: SandboxSpec;
  let h: SandboxHandle;
  const kubectl = async (...args: string[]): Promise<string> => {
    const r = await runKubectl(api.kubeconfig, ['-n', 'atelier', '--request-timeout=60s', ...args]);
    if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const privileged = (command: string): EphemeralSpec => ({
    command,
    binds: [
      { source: path.join(spec.rootDir, 'repo'), target: '/workspace' },
      { source: path.join(spec.rootDir, 'home'), target: '/home/user' },
    ],
    limits: LIMITS,
    network: 'none',
    cwd: '/workspace',
    timeoutMs: 60_000,
    privileged: true,
  });

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer();
    base = mkdtempSync('/tmp/atl-k8p-');
    ex = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'atelier', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run') });
    spec = { id: 'ws_K8sPriv1', rootDir: path.join(base, 'workspaces', 'ws_K8sPriv1'), limits: LIMITS, network: 'none' };
    h = await ex.create(spec);
  }, 120_000);
  afterAll(async () => {
    await ex?.close();
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('runs as uid 0 in a user namespace of its own on the workspace claim; what root made is the workspace user\'s afterwards', async () => {
    await ex.exec(h, { command: 'echo mine > owned.txt' });
    const seen: unknown[] = [];
    const stop = api.store.watch(Number(api.store.resourceVersion), (e) => seen.push(e));
    const r = await ex.runEphemeral(privileged('id -u; cat /proc/self/uid_map; stat -c %u owned.txt; chown 0:0 owned.txt && stat -c %u:%g owned.txt; mkdir -p made/deep && echo root > made/deep/r.txt; stat -c %u made/deep/r.txt'));
    stop?.();
    expect(r, JSON.stringify(r)).toMatchObject({ exitCode: 0 });
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).toBe('0');
    expect(lines[1]!.trim().split(/\s+/)).not.toEqual(['0', '0', '4294967295']);
    expect(lines.slice(2)).toEqual(['1000', '0:0', '0']);
    // The Pod the driver asked for (what the API server stored).
    const pod = (seen as Array<{ type: string; object: { kind: string; metadata: { labels?: Record<string, string> }; spec: Record<string, any> } }>).find((e) => e.type === 'ADDED' && e.object.kind === 'Pod' && e.object.metadata.labels?.['atelier.dev/role'] === 'ephemeral')?.object; // eslint-disable-line @typescript-eslint/no-explicit-any
    expect(pod?.spec.hostUsers).toBe(false);
    expect(pod?.spec.securityContext).toEqual({ runAsUser: 0, runAsGroup: 0, runAsNonRoot: false, fsGroup: 1000, seccompProfile: { type: 'RuntimeDefault' } });
    expect(pod?.spec.containers[0].securityContext).toEqual({ allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'], add: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID'] }, readOnlyRootFilesystem: false });
    expect(pod?.spec.containers[0].volumeMounts.filter((m: { mountPath: string }) => ['/workspace', '/home/user', '/tmp'].includes(m.mountPath))).toEqual([
      { name: 'data', mountPath: '/workspace', subPath: 'repo' },
      { name: 'data', mountPath: '/home/user', subPath: 'home' },
      { name: 'empty-tmp', mountPath: '/tmp' },
    ]);
    // Handed back: the workspace user edits what root wrote and the file root took.
    const after = await ex.exec(h, { command: 'echo more >> made/deep/r.txt && echo more >> owned.txt && rm -r made && stat -c %u owned.txt' });
    expect(after, JSON.stringify(after)).toMatchObject({ exitCode: 0, stdout: '1000\n' });
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
  }, 180_000);

  it('what the command left running (setsid) is ended before the hand-back: nothing of uid 0 is left on the claim', async () => {
    const r = await ex.runEphemeral(privileged("mkdir -p late && setsid sh -c 'i=0; while :; do i=$((i + 1)); : > late/f$i; sleep 0.02; done' </dev/null >/dev/null 2>&1 & until [ $(ls late | wc -l) -ge 5 ]; do sleep 0.05; done; echo started"));
    expect(r, JSON.stringify(r)).toMatchObject({ exitCode: 0, stdout: 'started\n' });
    const repo = path.join(api.runtime.claimDir('atelier', objectName(spec.id)), 'repo');
    const made = readdirSync(path.join(repo, 'late'));
    expect(made.length).toBeGreaterThanOrEqual(5);
    // Every file it made is the workspace user's (64000 on the fixture's node): none came after the hand-back.
    expect(made.filter((f) => lstatSync(path.join(repo, 'late', f)).uid !== 64000)).toEqual([]);
    expect((await ex.exec(h, { command: 'rm -r late && echo gone' })).stdout).toBe('gone\n');
  }, 120_000);

  it('refused when the API server drops hostUsers only on the real create (a skewed control plane): the Pod is deleted, nothing ran, the error names hostUsers', async () => {
    api.userNamespacesSupport = 'dry-run only';
    const seen: Array<{ type: string; object: { kind: string; spec?: { hostUsers?: boolean } } }> = [];
    const stop = api.store.watch(Number(api.store.resourceVersion), (e) => seen.push(JSON.parse(JSON.stringify(e))));
    try {
      await expect(ex.runEphemeral(privileged('echo ran > ran.txt'))).rejects.toMatchObject({ code: 'FAILED_PRECONDITION', details: { field: 'hostUsers' }, message: expect.stringMatching(/hostUsers.*deleted before anything ran.*Kubernetes 1\.33/) });
    } finally {
      api.userNamespacesSupport = true;
      stop?.();
    }
    const pods = seen.filter((e) => e.object.kind === 'Pod');
    expect(pods.find((e) => e.type === 'ADDED')?.object.spec?.hostUsers).toBeUndefined();
    expect(pods.some((e) => e.type === 'DELETED')).toBe(true);
    expect((await ex.exec(h, { command: 'ls ran.txt 2>&1 || true' })).stdout).toContain('No such file');
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
  }, 120_000);

  it('the fixture kubelet, through kubectl: hostUsers shown, exec as uid 0; a uid 0 Pod without a user namespace is refused', async () => {
    const claim = objectName(spec.id);
    const podYaml = (name: string, hostUsers: boolean) =>
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name },
        spec: {
          ...(hostUsers ? {} : { hostUsers: false }),
          restartPolicy: 'Never',
          securityContext: { runAsUser: 0, runAsGroup: 0, runAsNonRoot: false },
          containers: [{ name: 'main', image: 'atelier-workspace:test', command: ['sh', '-c', 'exec node /opt/atelier/daemon/main.js --socket /run/atelier/d.sock --workspace /workspace'], securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'], add: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID'] } }, volumeMounts: [{ name: 'data', mountPath: '/workspace', subPath: 'repo' }, { name: 'data', mountPath: '/home/user', subPath: 'home' }, { name: 't', mountPath: '/tmp' }] }],
          volumes: [{ name: 'data', persistentVolumeClaim: { claimName: claim } }, { name: 't', emptyDir: {} }],
        },
      });
    const file = path.join(base, 'pod.json');
    writeFileSync(file, podYaml('kp-userns', false));
    await kubectl('create', '--validate=false', '-f', file);
    const phase = (name: string) => (api.store.get('pods', 'atelier', name).status as { phase?: string } | undefined)?.phase;
    await until(() => (phase('kp-userns') === 'Running' ? true : phase('kp-userns') === 'Failed' ? Promise.reject(new Error(JSON.stringify(api.store.get('pods', 'atelier', 'kp-userns').status))) : undefined), 'the uid 0 pod running');
    expect(await kubectl('get', 'pod', 'kp-userns', '-o', 'yaml')).toMatch(/^ {2}hostUsers: false$/m);
    // uid 0 with the container's capabilities only: CHOWN, DAC_OVERRIDE, FOWNER, SETGID, SETUID (bits 0, 1, 3, 6, 7).
    expect((await kubectl('exec', 'kp-userns', '--', 'sh', '-c', 'id -u; grep CapBnd /proc/self/status')).split('\n').slice(0, 2)).toEqual(['0', 'CapBnd:\t00000000000000cb']);
    // A node file the Pod can see (in its claim) but that belongs to the node's root: not readable.
    const nodeFile = path.join(api.runtime.claimDir('atelier', claim), 'repo', 'node-root.txt');
    writeFileSync(nodeFile, 'node only\n', { mode: 0o600 });
    try {
      expect((await kubectl('exec', 'kp-userns', '--', 'sh', '-c', 'cat /workspace/node-root.txt 2>&1; stat -c %u /workspace/node-root.txt')).trim().split('\n')).toEqual([expect.stringContaining('Permission denied'), '65534']);
    } finally {
      rmSync(nodeFile);
    }
    expect(statSync(path.join(api.runtime.claimDir('atelier', claim), 'repo')).uid).toBe(64000);
    await kubectl('delete', 'pod', 'kp-userns', '--wait=false');
    writeFileSync(file, podYaml('kp-noruns', true));
    await kubectl('create', '--validate=false', '-f', file);
    await until(() => (phase('kp-noruns') === 'Failed' ? true : undefined), 'the refused pod failed');
    expect(await kubectl('get', 'pod', 'kp-noruns', '-o', 'jsonpath={.status.message}')).toContain('runAsUser 0 without hostUsers: false');
    await kubectl('delete', 'pod', 'kp-noruns', '--wait=false');
  }, 180_000);
});

describe.skipIf(!isRoot)('privileged commands on an agent-sandbox Sandbox workspace (fixture API server)', () => {
  let api: KubeApiServer;
  let base: string;
  let ex: KubernetesExecutor;

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer({ agentSandbox: true });
    base = mkdtempSync('/tmp/atl-k8q-');
    ex = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'atelier', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run') });
  }, 60_000);
  afterAll(async () => {
    await ex?.close();
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('the privileged Pod mounts the Sandbox\'s claim, on its Pod\'s node, and hands root\'s files back', async () => {
    const spec: SandboxSpec = { id: 'ws_K8sPrivSb', rootDir: path.join(base, 'workspaces', 'ws_K8sPrivSb'), limits: LIMITS, network: 'none' };
    const h = await ex.create(spec);
    expect(h.placement?.objectKind).toBe('Sandbox');
    const seen: Array<{ type: string; object: { kind: string; spec: Record<string, any> } }> = []; // eslint-disable-line @typescript-eslint/no-explicit-any
    const stop = api.store.watch(Number(api.store.resourceVersion), (e) => seen.push(JSON.parse(JSON.stringify(e))));
    const r = await ex.runEphemeral({
      command: 'id -u; echo root > r.txt',
      binds: [
        { source: path.join(spec.rootDir, 'repo'), target: '/workspace' },
        { source: path.join(spec.rootDir, 'home'), target: '/home/user' },
      ],
      limits: LIMITS,
      network: 'none',
      cwd: '/workspace',
      timeoutMs: 60_000,
      privileged: true,
    });
    stop?.();
    expect(r, JSON.stringify(r)).toMatchObject({ exitCode: 0, stdout: '0\n' });
    const pod = seen.find((e) => e.type === 'ADDED' && e.object.kind === 'Pod' && e.object.spec.hostUsers === false)?.object;
    expect(pod?.spec.volumes.find((v: { name: string }) => v.name === 'data')).toEqual({ name: 'data', persistentVolumeClaim: { claimName: `data-${objectName(spec.id)}` } });
    // Beside the Sandbox's Pod (its node when known, else required affinity to it): the claim is ReadWriteOnce.
    expect(pod?.spec.nodeName ?? pod?.spec.affinity?.podAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.[0]?.labelSelector?.matchLabels?.['atelier.dev/policy']).toBe(api.store.get('pods', 'atelier', h.placement!.pod).spec?.nodeName ?? objectName(spec.id));
    expect((await ex.exec(h, { command: 'echo more >> r.txt && stat -c %u r.txt' })).stdout).toBe('1000\n');
    await ex.destroy(h);
  }, 180_000);
});
