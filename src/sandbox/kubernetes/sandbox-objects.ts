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
import { claimManifest, daemonPodManifest } from './manifests.js';
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
