/**
 * deploy/kubernetes/agent-sandbox.yaml's SandboxTemplate is what the runner accepts from a claim
 * with its default settings (src/sandbox/kubernetes/sandbox-objects.ts claimedPodMismatch), and
 * each setting a claimed Pod must share with the workspace's own Pod is checked by name.
 */
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { daemonPodManifest } from '../../src/sandbox/kubernetes/manifests.js';
import { claimedPodMismatch, sandboxClaimManifest, type PodShape } from '../../src/sandbox/kubernetes/sandbox-objects.js';
import { loadConfig } from '../../src/core/config.js';

const docs = parseAllDocuments(readFileSync(new URL('../../deploy/kubernetes/agent-sandbox.yaml', import.meta.url), 'utf8')).map((d) => d.toJSON() as Record<string, any>); // eslint-disable-line @typescript-eslint/no-explicit-any
const template = docs.find((d) => d.kind === 'SandboxTemplate')!;

/** The Pod the Sandbox controller makes from the template for Sandbox `sb`: its volume claim template `data` as the claim data-<sb>. */
function podOf(sb: string): PodShape {
  const spec = structuredClone(template.spec.podTemplate.spec);
  spec.volumes = [...(spec.volumes ?? []), { name: 'data', persistentVolumeClaim: { claimName: `data-${sb}` } }];
  return { metadata: { annotations: template.spec.podTemplate.metadata.annotations }, spec };
}

describe('claims from a warm pool: the template and the runner agree', () => {
  const o = { namespace: 'atelier', workspaceImage: 'atelier-workspace:latest', runDir: '/x' };

  it("the deploy template matches the runner's default workspace Pod", () => {
    const c = loadConfig([], {});
    const limits = { memoryBytes: c.sandboxMemoryMb * 1024 * 1024, pidsMax: c.sandboxPidsMax, cpuQuotaPercent: c.sandboxCpuPercent };
    const want = daemonPodManifest({ name: 'atl-x', id: 'ws_x', role: 'workspace', claim: 'data-warm-abcde', limits, o });
    expect(claimedPodMismatch(podOf('warm-abcde'), 'warm-abcde', want)).toBeUndefined();
  });

  it('names what differs', () => {
    const limits = { memoryBytes: 2048 * 1024 * 1024, pidsMax: 512, cpuQuotaPercent: 100 };
    const want = (x: Partial<typeof limits> = {}, oo: Partial<typeof o & { runtimeClass: string }> = {}) => daemonPodManifest({ name: 'atl-x', id: 'ws_x', role: 'workspace', claim: 'data-s', limits: { ...limits, ...x }, o: { ...o, ...oo } });
    expect(claimedPodMismatch(podOf('s'), 's', want({ memoryBytes: 1024 * 1024 * 1024 }))).toBe("its memory limit 2147483648 is not the workspace's 1073741824");
    expect(claimedPodMismatch(podOf('s'), 's', want({ cpuQuotaPercent: 200 }))).toBe("its cpu limit 1000m is not the workspace's 2000m");
    expect(claimedPodMismatch(podOf('s'), 's', want({ pidsMax: 64 }))).toBe("its atelier.dev/pids-max is not the workspace's 64");
    expect(claimedPodMismatch(podOf('s'), 's', want({}, { workspaceImage: 'other:1' }))).toBe('its image atelier-workspace:latest is not other:1');
    expect(claimedPodMismatch(podOf('s'), 's', want({}, { runtimeClass: 'gvisor' }))).toBe('its runtime class (default) is not gvisor');
    expect(claimedPodMismatch(podOf('other'), 's', want())).toMatch(/its volume "data" is not the claim data-s/);
    const noDaemon = podOf('s');
    noDaemon.spec!.containers![0]!.command = ['sleep', 'infinity'];
    expect(claimedPodMismatch(noDaemon, 's', want())).toBe('its container does not run the daemon');
    // Less isolation than the workspace's own Pod: never used.
    const worse: Array<[string, (p: PodShape) => void, RegExp]> = [
      ['a sidecar', (p) => p.spec!.containers!.push({ name: 'side', image: 'x' }), /2 containers/],
      ['the node network', (p) => (p.spec!.hostNetwork = true), /node's Network namespace/],
      ['the node pids', (p) => (p.spec!.hostPID = true), /node's PID namespace/],
      ['a service account token', (p) => delete p.spec!.automountServiceAccountToken, /service account token/],
      ['root', (p) => (p.spec!.securityContext = { runAsUser: 0, runAsNonRoot: false }), /workspace user/],
      ['privileged', (p) => (p.spec!.containers![0]!.securityContext = { ...p.spec!.containers![0]!.securityContext, privileged: true }), /gain privileges/],
      ['escalation', (p) => (p.spec!.containers![0]!.securityContext = { ...p.spec!.containers![0]!.securityContext, allowPrivilegeEscalation: true }), /gain privileges/],
      ['a capability', (p) => (p.spec!.containers![0]!.securityContext = { ...p.spec!.containers![0]!.securityContext, capabilities: { drop: ['ALL'], add: ['SYS_ADMIN'] } }), /gain privileges/],
      ['a host path', (p) => p.spec!.volumes!.push({ name: 'node' } as never), /volume "node" is neither/],
    ];
    for (const [what, worsen, why] of worse) {
      const p = podOf('s');
      worsen(p);
      expect(claimedPodMismatch(p, 's', want()), what).toMatch(why);
    }
    const withInit = podOf('s');
    withInit.spec!.initContainers = [{ name: 'x' }];
    expect(claimedPodMismatch(withInit, 's', want())).toBe('it has init containers');
  });

  it("a claim carries the workspace's labels and its NetworkPolicy's label, and nothing of its environment", () => {
    const c = sandboxClaimManifest({ name: 'atl-abc', id: 'ws_x', pool: 'atelier-workspace', version: 'v1beta1' });
    expect(c).toEqual({
      apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
      kind: 'SandboxClaim',
      metadata: { name: 'atl-abc', labels: { 'app.kubernetes.io/managed-by': 'atelier', 'atelier.dev/role': 'workspace', 'atelier.dev/workspace': 'ws_x' } },
      spec: { warmPoolRef: { name: 'atelier-workspace' }, additionalPodMetadata: { labels: { 'app.kubernetes.io/managed-by': 'atelier', 'atelier.dev/role': 'workspace', 'atelier.dev/workspace': 'ws_x', 'atelier.dev/policy': 'atl-abc' } } },
    });
  });
});
