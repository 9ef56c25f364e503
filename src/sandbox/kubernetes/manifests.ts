/** The objects the driver makes: a workspace's claim, its Pod, its NetworkPolicy; short-lived Pods. */
import type { V1Container, V1NetworkPolicy, V1PersistentVolumeClaim, V1Pod, V1VolumeMount, V1Volume } from '@kubernetes/client-node';
import type { SandboxLimits, SandboxNetwork } from '../executor.js';
import { labelsFor, WORKSPACE_ROLE, MANAGED_BY } from './names.js';
import type { KubernetesExecutorOptions } from './options.js';
import { PRIVILEGED_CAPABILITIES } from './privileged.js';
import { TUNNEL_PROXY_ENV } from './tunnel.js';

/** Inside the workspace image. */
export const IN_DAEMON = '/opt/atelier/daemon/main.js';
export const IN_BRIDGE = '/opt/atelier/daemon/stdio-bridge.js';
export const IN_SOCKET = '/run/atelier/d.sock';
const IN_ENV_FILE = '/run/atelier/env.json';

export function claimManifest(name: string, id: string, o: KubernetesExecutorOptions): V1PersistentVolumeClaim {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name, labels: labelsFor(id, WORKSPACE_ROLE) },
    spec: {
      accessModes: ['ReadWriteOnce'],
      ...(o.storageClass ? { storageClassName: o.storageClass } : {}),
      resources: { requests: { storage: o.storageSize ?? '10Gi' } },
    },
  };
}

/**
 * A Pod running the daemon. `volumes` maps the workspace layout (repo at /workspace, home at
 * /home/user, tmp at /tmp) onto a claim's sub-paths. The daemon takes the commands' environment
 * from a file, never its own environment: the entry point writes ATELIER_ENV_JSON there first.
 */
export function daemonPodManifest(args: {
  name: string;
  id: string;
  role: string;
  claim: string;
  limits: SandboxLimits;
  env?: Record<string, string>;
  o: KubernetesExecutorOptions;
  nodeName?: string;
  /** Scheduled on the node of this workspace Pod (its ReadWriteOnce claim), when that node is not known yet. */
  nearWorkspace?: string;
  /** Directories the runner copies in (release-volumes.ts): their volume, init container and read-only mounts. */
  copies?: { volumes: V1Volume[]; initContainers: V1Container[]; mounts: V1VolumeMount[] };
  /** Which of the claim's sub-paths are mounted, and how (absent: all three, read-write). */
  subs?: Partial<Record<'repo' | 'home' | 'tmp', { readOnly: boolean }>>;
  /**
   * An approved privileged command's Pod (privileged.ts): uid 0 in a Kubernetes user namespace
   * (hostUsers: false) with only PRIVILEGED_CAPABILITIES; otherwise uid 1000, no capability.
   */
  privileged?: boolean;
}): V1Pod {
  const { o, limits } = args;
  // The claim's sub-paths the Pod takes (all three, read-write, unless `subs` says); one not
  // taken is an emptyDir of the Pod's own (as bubblewrap gives an unbound /tmp or home a tmpfs).
  const mounts: V1VolumeMount[] = [];
  const volumes: V1Volume[] = [{ name: 'data', persistentVolumeClaim: { claimName: args.claim } }];
  for (const [sub, at] of [['repo', '/workspace'], ['home', '/home/user'], ['tmp', '/tmp']] as const) {
    const take = args.subs ? args.subs[sub] : { readOnly: false };
    if (take) {
      mounts.push({ name: 'data', mountPath: at, subPath: sub, ...(take.readOnly ? { readOnly: true } : {}) });
    } else {
      volumes.push({ name: `empty-${sub}`, emptyDir: {} });
      mounts.push({ name: `empty-${sub}`, mountPath: at });
    }
  }
  volumes.push(...(args.copies?.volumes ?? []));
  mounts.push(...(args.copies?.mounts ?? []));
  // A workspace's commands always get the proxy variables (127.0.0.1:3128, where its egress proxy
  // tunnel listens under dependency-access: proxy-tunnel.ts); the environment is fixed at Pod start
  // and the network may change after. Short-lived Pods get them from runEphemeral when they have a proxy.
  const commandEnv = args.role === WORKSPACE_ROLE ? workspaceCommandEnv(args.env) : { ...(args.env ?? {}) };
  const cpu = `${Math.max(1, Math.round(limits.cpuQuotaPercent * 10))}m`;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: args.name, labels: { ...labelsFor(args.id, args.role), 'atelier.dev/policy': args.name }, annotations: { 'atelier.dev/pids-max': String(limits.pidsMax) } },
    spec: {
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      ...(o.runtimeClass ? { runtimeClassName: o.runtimeClass } : {}),
      ...(args.nodeName ? { nodeName: args.nodeName } : {}),
      ...(args.nearWorkspace && !args.nodeName
        ? { affinity: { podAffinity: { requiredDuringSchedulingIgnoredDuringExecution: [{ labelSelector: { matchLabels: { 'atelier.dev/policy': args.nearWorkspace } }, topologyKey: 'kubernetes.io/hostname' }] } } }
        : {}),
      ...(args.privileged ? { hostUsers: false } : {}),
      securityContext: args.privileged
        ? { runAsUser: 0, runAsGroup: 0, runAsNonRoot: false, fsGroup: 1000, seccompProfile: { type: 'RuntimeDefault' } }
        : { runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000, runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
      ...(args.copies?.initContainers.length ? { initContainers: args.copies.initContainers } : {}),
      containers: [
        {
          name: 'main',
          image: o.workspaceImage,
          command: ['sh', '-c', `umask 077 && mkdir -p /run/atelier && printf '%s' "$ATELIER_ENV_JSON" > ${IN_ENV_FILE} && exec node ${IN_DAEMON} --socket ${IN_SOCKET} --workspace /workspace --env-file ${IN_ENV_FILE} --orphan-grace-ms ${o.orphanGraceMs ?? 900_000}`],
          env: [{ name: 'ATELIER_ENV_JSON', value: JSON.stringify(commandEnv) }],
          workingDir: '/workspace',
          resources: {
            limits: { memory: String(limits.memoryBytes), cpu },
            requests: { memory: String(Math.min(limits.memoryBytes, 64 * 1024 * 1024)), cpu: '10m' },
          },
          securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'], ...(args.privileged ? { add: [...PRIVILEGED_CAPABILITIES] } : {}) }, readOnlyRootFilesystem: false },
          volumeMounts: mounts,
        },
      ],
      volumes,
    },
  };
}

/** The environment a workspace's commands start from: the proxy variables, then the workspace's own. */
export function workspaceCommandEnv(env: Record<string, string> | undefined): Record<string, string> {
  return { ...TUNNEL_PROXY_ENV, ...(env ?? {}) };
}

/**
 * The Pod's NetworkPolicy: deny all, both ways, whatever the network. dependency-access reaches
 * the runner's egress proxy through the socket tunnel over an exec stream (proxy-tunnel.ts), not
 * the Pod network; the annotation says which network the workspace has.
 */
export function networkPolicyManifest(name: string, id: string, network: SandboxNetwork): V1NetworkPolicy {
  const podSelector = { matchLabels: { [MANAGED_BY]: 'atelier', 'atelier.dev/policy': name } };
  const egress: [] = [];
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name, labels: labelsFor(id, WORKSPACE_ROLE), annotations: { 'atelier.dev/network': network === 'none' ? 'none' : 'proxy' } },
    spec: { podSelector, policyTypes: ['Ingress', 'Egress'], ingress: [], egress },
  };
}
