/**
 * Approved privileged commands on Kubernetes (issue #34), the pure parts: the uid_map check
 * (src/sandbox/id-map.ts), the privileged Pod's manifest (kubernetes/manifests.ts), the stored
 * Pod's hostUsers check and the hand-back command (kubernetes/privileged.ts), and the bubblewrap
 * driver refusing an id map that reaches the host's root (SandboxSpec.rootUserNamespace).
 */
import { describe, expect, it } from 'vitest';
import { hostRootProblem, parseIdMap } from '../../src/sandbox/id-map.js';
import { daemonPodManifest } from '../../src/sandbox/kubernetes/manifests.js';
import { HAND_BACK, hostUsersProblem, podSecurityRefusal, PRIVILEGED_CAPABILITIES } from '../../src/sandbox/kubernetes/privileged.js';
import { asServiceError } from '../../src/sandbox/kubernetes/api.js';
import { validateSpec } from '../../src/sandbox/bwrap/validate.js';

const LIMITS = { memoryBytes: 512 * 1024 * 1024, pidsMax: 256, cpuQuotaPercent: 100 };
const O = { namespace: 'atelier', workspaceImage: 'img', runDir: '/tmp/x' };

describe('uid_map', () => {
  it('parses the kernel format (padded columns, several lines) and refuses anything else', () => {
    expect(parseIdMap('         0      65536      65536\n')).toEqual([{ inside: 0, outside: 65536, count: 65536 }]);
    expect(parseIdMap('0 100000 1000\n1000 1000 1\n')).toHaveLength(2);
    expect(parseIdMap('')).toEqual([]);
    for (const bad of ['0 0', 'a b c', '0 0 0', '0 -1 5', '0 0 99999999999', '0 0 4294967296']) expect(parseIdMap(bad), bad).toBeNull();
  });

  it('a Kubernetes user namespace passes; the node identity map, any range onto node uid 0, empty or garbage fail', () => {
    expect(hostRootProblem('         0  1342177280      65536\n')).toBeNull();
    expect(hostRootProblem('0 63000 65536\n')).toBeNull();
    expect(hostRootProblem('         0          0 4294967295\n')).toMatch(/identity map of the node/);
    expect(hostRootProblem('0 0 1\n')).toMatch(/onto the node root/);
    expect(hostRootProblem('1000 1000 1\n5 0 1\n')).toMatch(/uid 5 inside onto the node root/);
    expect(hostRootProblem('')).toMatch(/empty/);
    expect(hostRootProblem('cat: /proc/self/uid_map: No such file')).toMatch(/not a user namespace map/);
  });
});

describe('the privileged Pod', () => {
  const pod = (privileged: boolean) => daemonPodManifest({ name: 'atl-x', id: 'eph-1', role: 'ephemeral', claim: 'atl-ws', limits: LIMITS, o: O, subs: { repo: { readOnly: false }, home: { readOnly: false } }, nodeName: 'node-a', privileged });

  it('hostUsers false, uid 0, fsGroup 1000, RuntimeDefault seccomp, no escalation, every capability dropped but a root user\'s file and process ones; repo and home of the claim', () => {
    const p = pod(true);
    expect(p.spec!.hostUsers).toBe(false);
    expect(p.spec!.securityContext).toEqual({ runAsUser: 0, runAsGroup: 0, runAsNonRoot: false, fsGroup: 1000, seccompProfile: { type: 'RuntimeDefault' } });
    expect(p.spec!.containers[0]!.securityContext).toEqual({ allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'], add: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID'] }, readOnlyRootFilesystem: false });
    expect(PRIVILEGED_CAPABILITIES).not.toContain('SYS_ADMIN');
    expect(p.spec!.automountServiceAccountToken).toBe(false);
    expect(p.spec!.nodeName).toBe('node-a');
    expect(p.spec!.containers[0]!.volumeMounts).toEqual([
      { name: 'data', mountPath: '/workspace', subPath: 'repo' },
      { name: 'data', mountPath: '/home/user', subPath: 'home' },
      { name: 'empty-tmp', mountPath: '/tmp' },
    ]);
    expect(p.spec!.containers[0]!.resources!.limits).toEqual({ memory: String(LIMITS.memoryBytes), cpu: '1000m' });
  });

  it('any other Pod stays uid 1000 with no capability and no hostUsers field', () => {
    const p = pod(false);
    expect(p.spec!.hostUsers).toBeUndefined();
    expect(p.spec!.securityContext).toMatchObject({ runAsUser: 1000, runAsNonRoot: true });
    expect(p.spec!.containers[0]!.securityContext!.capabilities).toEqual({ drop: ['ALL'] });
  });

  it('the stored Pod must say hostUsers: false (an API server without UserNamespacesSupport drops it)', () => {
    expect(hostUsersProblem(pod(true))).toBeNull();
    const dropped = pod(true);
    delete dropped.spec!.hostUsers;
    expect(hostUsersProblem(dropped)).toMatch(/hostUsers absent/);
    expect(hostUsersProblem({ ...pod(true), spec: { ...pod(true).spec!, hostUsers: true } })).toMatch(/hostUsers true/);
  });

  it('a namespace enforcing restricted Pod Security: the refusal says which label the operator changes', () => {
    const forbidden = Object.assign(new Error('HTTP-Code: 403'), {
      code: 403,
      body: JSON.stringify({ kind: 'Status', status: 'Failure', reason: 'Forbidden', code: 403, message: 'pods "atl-x" is forbidden: violates PodSecurity "restricted:latest": unrestricted capabilities (container "main" must not include "CHOWN", "DAC_OVERRIDE" in securityContext.capabilities.add), runAsNonRoot != true' }),
    });
    const e = podSecurityRefusal(asServiceError(forbidden, 'create pod'), 'atelier');
    expect(e).toMatchObject({ code: 'FAILED_PRECONDITION', details: { field: 'privileged', namespace: 'atelier' } });
    expect(e!.message).toContain('violates PodSecurity "restricted:latest"');
    expect(e!.message).toContain('kubectl label namespace atelier pod-security.kubernetes.io/enforce=baseline');
    // Another 403 (RBAC) is left as it was.
    const rbac = Object.assign(new Error('HTTP-Code: 403'), { code: 403, body: JSON.stringify({ kind: 'Status', code: 403, message: 'pods is forbidden: User "system:serviceaccount:atelier:runner" cannot create resource "pods"' }) });
    expect(podSecurityRefusal(asServiceError(rbac, 'create pod'), 'atelier')).toBeNull();
  });

  it('the hand-back ends what the command left running, then follows no link and stays on the claim\'s mounts', () => {
    expect(HAND_BACK.slice(0, 2)).toEqual(['/bin/sh', '-c']);
    const last = HAND_BACK[2]!.split('\n').at(-1)!;
    expect(last).toBe('exec find -P /workspace /home/user -xdev \\( -uid 0 -o -gid 0 \\) -exec chown -h 1000:1000 {} +');
    expect(HAND_BACK[2]).toContain('kill -9');
    expect(HAND_BACK[2]).not.toMatch(/\$\((?!\()|`/); // builtins only in the loop: no process of its own
  });
});

describe('bubblewrap: the id map the runner writes (fixture kubelet only)', () => {
  const spec = (idMap: string, capabilities = ['CHOWN']) => ({ id: 'kp1', rootDir: '/tmp/r', limits: LIMITS, network: 'none' as const, rootUserNamespace: { idMap, capabilities } });
  it('never reaches the host root; capability names only', () => {
    expect(() => validateSpec(spec('0 63000 65536\n'))).not.toThrow();
    expect(() => validateSpec(spec('0 0 65536\n'))).toThrow(/rootUserNamespace.idMap/);
    expect(() => validateSpec(spec('0 63000 65536\n', ['CHOWN; rm']))).toThrow(/rootUserNamespace.capabilities/);
  });
});
