/**
 * agent-sandbox (kubernetes-sigs/agent-sandbox, API group agents.x-k8s.io) `Sandbox` objects: when
 * the cluster serves them, a workspace is one Sandbox whose controller makes the Pod and the
 * claim. What the real controller does (controllers/sandbox_controller.go there), and so what
 * this driver relies on:
 *
 * - the Pod is named as the Sandbox (a warm-pool adoption names it in the annotation
 *   agents.x-k8s.io/pod-name), from spec.podTemplate (labels and annotations propagated), with
 *   the tracking label agents.x-k8s.io/sandbox-name-hash and an owner reference to the Sandbox;
 * - each spec.volumeClaimTemplates entry NAME becomes a claim `NAME-<sandbox name>` owned by the
 *   Sandbox, and a Pod volume NAME pointing at it (replacing a template volume of that name);
 * - v1beta1 (the storage version): spec.operatingMode Running | Suspended; v1alpha1 (still
 *   served): spec.replicas 1 | 0. Suspended (0) deletes the Pod and keeps the claims;
 * - deleting the Sandbox deletes its Pod and claims (garbage collection by owner reference);
 * - status.conditions Ready (True once the Pod runs, is Ready and has an IP; False with a
 *   reason: DependenciesNotReady, SandboxSuspended, PodSucceeded, PodFailed, ReconcilerError).
 *
 * SandboxTemplate, SandboxClaim and SandboxWarmPool are in the group extensions.agents.x-k8s.io.
 */
import type { CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import type { SandboxLimits } from '../executor.js';
import { asServiceError, createOrKeep, deleteIfPresent, orNull, statusCode } from './api.js';
import { claimManifest, daemonPodManifest, IN_DAEMON } from './manifests.js';
import { labelsFor, WORKSPACE_ROLE } from './names.js';
import type { KubernetesExecutorOptions } from './options.js';

export const AGENTS_GROUP = 'agents.x-k8s.io';
export const SANDBOX_PLURAL = 'sandboxes';
/** Newest first: the driver uses the first one the cluster serves. */
export const SANDBOX_VERSIONS = ['v1beta1', 'v1alpha1'] as const;
export type SandboxApiVersion = (typeof SANDBOX_VERSIONS)[number];
/** The volume claim template's name: the claim is `data-<sandbox name>`, the Pod's volume `data`. */
export const CLAIM_TEMPLATE = 'data';
export const POD_NAME_ANNOTATION = 'agents.x-k8s.io/pod-name';

export interface SandboxObject {
  apiVersion: string;
  kind: 'Sandbox';
  metadata: { name: string; namespace?: string; uid?: string; resourceVersion?: string; labels?: Record<string, string>; annotations?: Record<string, string>; deletionTimestamp?: string };
  spec: { operatingMode?: string; replicas?: number; [k: string]: unknown };
  status?: { conditions?: { type: string; status: string; reason?: string; message?: string }[]; podIPs?: string[]; nodeName?: string; serviceFQDN?: string };
}

/** The version of agents.x-k8s.io to use from the discovery's versions of that group, or undefined. */
export function pickSandboxVersion(served: string[]): SandboxApiVersion | undefined {
  return SANDBOX_VERSIONS.find((v) => served.includes(v));
}

export function sandboxClaimName(name: string): string {
  return `${CLAIM_TEMPLATE}-${name}`;
}

/** The Pod the Sandbox runs (its own name unless it adopted a warm-pool Pod). */
export function sandboxPodName(sb: SandboxObject): string {
  return sb.metadata.annotations?.[POD_NAME_ANNOTATION] || sb.metadata.name;
}

export function isSuspended(sb: SandboxObject): boolean {
  return sb.spec.operatingMode === 'Suspended' || sb.spec.replicas === 0;
}

export function readyCondition(sb: SandboxObject): { status: string; reason?: string; message?: string } | undefined {
  return sb.status?.conditions?.find((c) => c.type === 'Ready');
}

/**
 * A workspace's Sandbox: the daemon Pod of the Pod path (same security context, labels, limits,
 * environment, the policy label its NetworkPolicy selects, and the release copies' emptyDir,
 * init container and read-only mounts: release-volumes.ts) as the pod template, and the claim of
 * the Pod path as the volume claim template.
 */
export function sandboxManifest(args: { name: string; id: string; version: SandboxApiVersion; limits: SandboxLimits; env?: Record<string, string>; o: KubernetesExecutorOptions; copies?: Parameters<typeof daemonPodManifest>[0]['copies'] }): SandboxObject {
  const { name, id, version, o } = args;
  const pod = daemonPodManifest({ name, id, role: WORKSPACE_ROLE, claim: sandboxClaimName(name), limits: args.limits, env: args.env, o, copies: args.copies });
  const claim = claimManifest(sandboxClaimName(name), id, o);
  return {
    apiVersion: `${AGENTS_GROUP}/${version}`,
    kind: 'Sandbox',
    metadata: { name, labels: labelsFor(id, WORKSPACE_ROLE) },
    spec: {
      podTemplate: { metadata: { labels: pod.metadata!.labels, annotations: pod.metadata!.annotations }, spec: pod.spec },
      volumeClaimTemplates: [{ metadata: { name: CLAIM_TEMPLATE, labels: claim.metadata!.labels }, spec: claim.spec }],
      ...(version === 'v1beta1' ? { operatingMode: 'Running' } : { replicas: 1 }),
    },
  };
}

/** The Sandbox resource of one namespace, through the custom objects API. */
export class SandboxObjects {
  private constructor(
    private readonly api: CustomObjectsApi,
    private readonly namespace: string,
    readonly version: SandboxApiVersion,
  ) {}

  static async connect(kc: KubeConfig, namespace: string, version: SandboxApiVersion): Promise<SandboxObjects> {
    const { CustomObjectsApi } = await import('@kubernetes/client-node');
    return new SandboxObjects(kc.makeApiClient(CustomObjectsApi), namespace, version);
  }

  private get where(): { group: string; version: string; namespace: string; plural: string } {
    return { group: AGENTS_GROUP, version: this.version, namespace: this.namespace, plural: SANDBOX_PLURAL };
  }

  /** The collection's path (watch.ts). */
  get path(): string {
    return `/apis/${AGENTS_GROUP}/${this.version}/namespaces/${this.namespace}/${SANDBOX_PLURAL}`;
  }

  /** A list filtered by a field selector (watch.ts): the first object and the list's resourceVersion. */
  async list(fieldSelector: string): Promise<{ object: SandboxObject | null; resourceVersion: string }> {
    const l = (await this.api.listNamespacedCustomObject({ ...this.where, fieldSelector })) as { items?: SandboxObject[]; metadata?: { resourceVersion?: string } };
    return { object: l.items?.[0] ?? null, resourceVersion: l.metadata?.resourceVersion ?? '' };
  }

  get(name: string): Promise<SandboxObject | null> {
    return orNull(this.api.getNamespacedCustomObject({ ...this.where, name }) as Promise<SandboxObject>);
  }

  /** Creates it; an existing one (an earlier attempt, a restart) is kept: null. */
  create(body: SandboxObject): Promise<SandboxObject | null> {
    return createOrKeep(this.api.createNamespacedCustomObject({ ...this.where, body }) as Promise<SandboxObject>);
  }

  /**
   * Running or suspended (v1beta1 operatingMode, v1alpha1 replicas), and the pod template when
   * given (the next Pod starts from it), by read-modify-replace: a 409 Conflict (the controller
   * wrote meanwhile) reads again. False when the Sandbox is gone.
   */
  async setRunning(name: string, running: boolean, podTemplate?: unknown): Promise<boolean> {
    for (let attempt = 0; ; attempt++) {
      const sb = await this.get(name);
      if (!sb) return false;
      if (sb.metadata.deletionTimestamp) return false;
      const spec = { ...sb.spec };
      if (this.version === 'v1beta1') spec.operatingMode = running ? 'Running' : 'Suspended';
      else spec.replicas = running ? 1 : 0;
      if (podTemplate !== undefined) spec.podTemplate = podTemplate;
      if (spec.operatingMode === sb.spec.operatingMode && spec.replicas === sb.spec.replicas && JSON.stringify(spec.podTemplate) === JSON.stringify(sb.spec.podTemplate)) return true;
      try {
        await this.api.replaceNamespacedCustomObject({ ...this.where, name, body: { ...sb, spec } });
        return true;
      } catch (err) {
        if (statusCode(err) === 409 && attempt < 5) continue;
        if (statusCode(err) === 404) return false;
        throw asServiceError(err, running ? 'resume sandbox' : 'suspend sandbox');
      }
    }
  }

  /** Deletes it; its Pod and claims go with it (owner references, background propagation). */
  delete(name: string): Promise<void> {
    return deleteIfPresent(this.api.deleteNamespacedCustomObject({ ...this.where, name, propagationPolicy: 'Background' }));
  }
}

/**
 * agent-sandbox's extensions (extensions.agents.x-k8s.io): a SandboxClaim takes a Sandbox from a
 * SandboxWarmPool (extensions/controllers there). What the real claim controller does, and so what
 * this driver relies on: it adopts a Ready Sandbox of the pool (owner becomes the claim; the pod
 * template's metadata becomes the template's plus spec.additionalPodMetadata, which the Sandbox
 * controller puts on the running Pod; annotation agents.x-k8s.io/pod-name) or, with none Ready,
 * makes one from the pool's template (a cold start); it names it in status.sandbox.name and the
 * claim's annotation agents.x-k8s.io/sandbox-name, and the label agents.x-k8s.io/launch-type on
 * the Sandbox says warm or cold. Deleting the claim deletes the Sandbox (owner reference).
 */
export const EXTENSIONS_GROUP = 'extensions.agents.x-k8s.io';
export const CLAIM_VERSIONS = ['v1beta1', 'v1alpha1'] as const;
export type ClaimApiVersion = (typeof CLAIM_VERSIONS)[number];
export const CLAIM_SANDBOX_ANNOTATION = 'agents.x-k8s.io/sandbox-name';
export const LAUNCH_TYPE_LABEL = 'agents.x-k8s.io/launch-type';
/** The label a workspace's NetworkPolicy selects (manifests.ts): a claimed Pod gets it through additionalPodMetadata. */
export const POLICY_LABEL = 'atelier.dev/policy';

type Meta = { name: string; namespace?: string; uid?: string; resourceVersion?: string; labels?: Record<string, string>; annotations?: Record<string, string>; deletionTimestamp?: string };
export interface ClaimObject {
  apiVersion: string;
  kind: 'SandboxClaim';
  metadata: Meta;
  spec: { warmPoolRef: { name: string }; additionalPodMetadata?: { labels?: Record<string, string>; annotations?: Record<string, string> } };
  status?: { sandbox?: { name?: string }; conditions?: { type: string; status: string; reason?: string; message?: string }[] };
}
/** The version of extensions.agents.x-k8s.io to use, or undefined. */
export function pickClaimVersion(served: string[]): ClaimApiVersion | undefined {
  return CLAIM_VERSIONS.find((v) => served.includes(v));
}

/** The Sandbox a claim got (status.sandbox.name, else the claim's annotation), or undefined while it has none. */
export function claimedSandbox(c: ClaimObject): string | undefined {
  return c.status?.sandbox?.name || c.metadata.annotations?.[CLAIM_SANDBOX_ANNOTATION] || undefined;
}

/**
 * A workspace's claim: named as its objects (atl-<hash>), labelled with the workspace; the Pod it
 * gets carries the workspace's labels and the policy label its NetworkPolicy selects.
 */
export function sandboxClaimManifest(args: { name: string; id: string; pool: string; version: ClaimApiVersion }): ClaimObject {
  const labels = labelsFor(args.id, WORKSPACE_ROLE);
  return {
    apiVersion: `${EXTENSIONS_GROUP}/${args.version}`,
    kind: 'SandboxClaim',
    metadata: { name: args.name, labels },
    spec: { warmPoolRef: { name: args.pool }, additionalPodMetadata: { labels: { ...labels, [POLICY_LABEL]: args.name } } },
  };
}

/** What the runner reads of a claimed Pod (plain JSON or the client's V1Pod). */
export interface PodShape {
  metadata?: { annotations?: Record<string, string> };
  spec?: {
    runtimeClassName?: string;
    initContainers?: unknown[];
    hostNetwork?: boolean;
    hostPID?: boolean;
    hostIPC?: boolean;
    automountServiceAccountToken?: boolean;
    securityContext?: { runAsUser?: number; runAsNonRoot?: boolean };
    containers?: Array<{
      name?: string;
      image?: string;
      command?: string[];
      resources?: { limits?: Record<string, unknown> };
      securityContext?: { privileged?: boolean; allowPrivilegeEscalation?: boolean; capabilities?: { add?: string[]; drop?: string[] } };
    }>;
    volumes?: Array<{ name?: string; persistentVolumeClaim?: { claimName?: string }; emptyDir?: unknown }>;
  };
}

/**
 * Why a claimed Pod is not what this workspace's Pod would be (`want`: daemonPodManifest), or
 * undefined. Its isolation must be at least the workspace Pod's (one container, none of the node's
 * namespaces, no service account token, the workspace user, no privilege, capability or escalation,
 * only its claim and emptyDirs as volumes). What a warm Pod cannot take after start must match: the image, the runtime class,
 * the daemon as entry point, the memory and CPU limits, the pids limit, no init container, and
 * the workspace's files on the claim of the volume claim template `data` (`data-<sandbox>`). The
 * environment is given after start (the daemon's env.set). The runner reads the Pod (it may read
 * Pods), not the pool's template (its Role has no access to templates or pools).
 */
export function claimedPodMismatch(pod: PodShape, sandbox: string, want: ReturnType<typeof daemonPodManifest>): string | undefined {
  const c = pod.spec?.containers?.find((x) => x.name === 'main') ?? pod.spec?.containers?.[0];
  const w = want.spec!.containers[0]!;
  if (!c) return 'it has no container';
  // Isolation first: a template that runs the daemon with less of it than the workspace's own Pod
  // (another container beside it, the node's namespaces, a service account token, root, a
  // capability, escalation, a volume other than its claim and emptyDirs) is never used.
  const sp = pod.spec!;
  if ((sp.containers?.length ?? 0) !== 1) return `it has ${sp.containers?.length ?? 0} containers, not the workspace's one`;
  for (const k of ['hostNetwork', 'hostPID', 'hostIPC'] as const) if (sp[k]) return `it shares the node's ${k.slice(4)} namespace (${k})`;
  if (sp.automountServiceAccountToken !== false) return 'it mounts a service account token (automountServiceAccountToken is not false)';
  if (sp.securityContext?.runAsNonRoot !== true || sp.securityContext.runAsUser !== want.spec!.securityContext!.runAsUser) return `it does not run as the workspace user (securityContext runAsNonRoot true, runAsUser ${want.spec!.securityContext!.runAsUser})`;
  const sc = c.securityContext;
  if (sc?.privileged || sc?.allowPrivilegeEscalation !== false || !(sc.capabilities?.drop ?? []).includes('ALL') || (sc.capabilities?.add ?? []).length > 0)
    return 'its container may gain privileges (privileged, allowPrivilegeEscalation not false, or capabilities other than drop ALL)';
  const foreign = (sp.volumes ?? []).find((v) => !(v.emptyDir || (v.name === CLAIM_TEMPLATE && v.persistentVolumeClaim)));
  if (foreign) return `its volume "${foreign.name ?? '(unnamed)'}" is neither its claim nor an emptyDir`;
  if (c.image !== w.image) return `its image ${c.image ?? '(none)'} is not ${w.image}`;
  if ((pod.spec?.runtimeClassName ?? '') !== (want.spec!.runtimeClassName ?? '')) return `its runtime class ${pod.spec?.runtimeClassName ?? '(default)'} is not ${want.spec!.runtimeClassName ?? '(default)'}`;
  if (!(c.command ?? []).some((a) => a.includes(IN_DAEMON))) return 'its container does not run the daemon';
  for (const k of ['memory', 'cpu'] as const) {
    const have = c.resources?.limits?.[k];
    const need = String(w.resources!.limits![k]);
    if (have === undefined || String(have) !== need) return `its ${k} limit ${have === undefined ? '(none)' : String(have)} is not the workspace's ${need}`;
  }
  const pids = want.metadata!.annotations!['atelier.dev/pids-max'];
  if (pod.metadata?.annotations?.['atelier.dev/pids-max'] !== pids) return `its atelier.dev/pids-max is not the workspace's ${pids}`;
  if (pod.spec?.initContainers?.length) return 'it has init containers';
  if (!pod.spec?.volumes?.some((v) => v.name === CLAIM_TEMPLATE && v.persistentVolumeClaim?.claimName === sandboxClaimName(sandbox))) return `its volume "${CLAIM_TEMPLATE}" is not the claim ${sandboxClaimName(sandbox)} (the template's volume claim template "${CLAIM_TEMPLATE}")`;
  return undefined;
}

/** The SandboxClaims of one namespace. */
export class ClaimObjects {
  private constructor(
    private readonly api: CustomObjectsApi,
    private readonly namespace: string,
    readonly version: ClaimApiVersion,
  ) {}

  static async connect(kc: KubeConfig, namespace: string, version: ClaimApiVersion): Promise<ClaimObjects> {
    const { CustomObjectsApi } = await import('@kubernetes/client-node');
    return new ClaimObjects(kc.makeApiClient(CustomObjectsApi), namespace, version);
  }

  private where(plural: string): { group: string; version: string; namespace: string; plural: string } {
    return { group: EXTENSIONS_GROUP, version: this.version, namespace: this.namespace, plural };
  }

  /** The claims' collection path (watch.ts). */
  get path(): string {
    return `/apis/${EXTENSIONS_GROUP}/${this.version}/namespaces/${this.namespace}/sandboxclaims`;
  }

  async list(fieldSelector: string): Promise<{ object: ClaimObject | null; resourceVersion: string }> {
    const l = (await this.api.listNamespacedCustomObject({ ...this.where('sandboxclaims'), fieldSelector })) as { items?: ClaimObject[]; metadata?: { resourceVersion?: string } };
    return { object: l.items?.[0] ?? null, resourceVersion: l.metadata?.resourceVersion ?? '' };
  }

  get(name: string): Promise<ClaimObject | null> {
    return orNull(this.api.getNamespacedCustomObject({ ...this.where('sandboxclaims'), name }) as Promise<ClaimObject>);
  }

  /** Creates it; an existing one is kept: null. */
  create(body: ClaimObject): Promise<ClaimObject | null> {
    return createOrKeep(this.api.createNamespacedCustomObject({ ...this.where('sandboxclaims'), body }) as Promise<ClaimObject>);
  }

  /** Deletes it; its Sandbox (and so the Pod and the Sandbox's claims) go with it. */
  delete(name: string): Promise<void> {
    return deleteIfPresent(this.api.deleteNamespacedCustomObject({ ...this.where('sandboxclaims'), name, propagationPolicy: 'Background' }));
  }
}
