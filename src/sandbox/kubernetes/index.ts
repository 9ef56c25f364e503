/**
 * The Kubernetes executor driver: every sandbox a Pod in the cluster, reached through the same
 * Executor interface as the bubblewrap driver (../bwrap/index.ts).
 *
 *   workspace  = PersistentVolumeClaim (its files: repo/, home/, tmp/ sub-paths) + Pod running the
 *                workspace image's daemon + NetworkPolicy (deny-all, whatever the network); all
 *                named atl-<hash of the id> and labelled with the id
 *   dependency-access = the runner's per-workspace egress proxy through a long-lived socket
 *                tunnel into the Pod, at 127.0.0.1:3128 there (proxy-tunnel.ts)
 *   daemon     = reached over Kubernetes exec streams through a runner-local relay socket
 *                (relay.ts), its newline-delimited protocol unchanged
 *   stop       = delete the Pod (the claim, so the files, stay); destroy = Pod, policy and claim
 *   agent-sandbox installed (sandbox-objects.ts): the workspace is a Sandbox whose controller
 *                makes the Pod and the claim data-<name>; stop suspends it, destroy deletes it
 *   relay      = preview URLs: the daemon's relay mode over one more exec stream
 *   recover    = the Pod by name after a runner restart, when it still runs
 *   stats      = the metrics API (metrics.k8s.io)
 *   ephemeral  = a short-lived daemon Pod per command, deleted after it; read-only directories
 *                (package releases) copied in by an init container (release-volumes.ts), a build's
 *                collected directory copied in and its tree streamed back (untar.ts)
 *   privileged = an approved privileged command: the short-lived Pod in a Kubernetes user namespace
 *                (hostUsers: false, uid 0, a root user's file capabilities), refused when the
 *                cluster cannot give one, root's files handed back afterwards (privileged.ts)
 *
 * What only the bubblewrap driver has stays behind it: per-exec cgroups (here the daemon alone
 * ends a command's process group, on timeout or cancel and, unless the caller keeps background
 * work, when it returns; a setsid'd child escapes it), spare exec starters, the files_read descriptor handoff
 * (fileHandoffs is absent), host-path binds (a workspace's own root maps onto its claim;
 * read-only directories are copied, a build's directory copied both ways).
 */
import { createHash } from 'node:crypto';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { V1Pod } from '@kubernetes/client-node';
import { ServiceError } from '../../core/errors.js';
import { DaemonClient } from '../client.js';
import type { DaemonMethod, ExecResult, ParamsOf, ReplyOf } from '../daemon/protocol.js';
import { execParams } from '../exec-params.js';
import type { EphemeralBind, EphemeralLayout, EphemeralSpec, ExecRequest, Executor, SandboxHandle, SandboxNetwork, SandboxPlacement, SandboxSpec, SandboxStats } from '../executor.js';
import { asServiceError, connectKube, createOrKeep, deleteIfPresent, orNull, type KubeClients } from './api.js';
import { claimManifest, daemonPodManifest, networkPolicyManifest, workspaceCommandEnv } from './manifests.js';
import { EPHEMERAL_ROLE, objectName, WORKSPACE_ROLE } from './names.js';
import type { KubernetesExecutorOptions } from './options.js';
import { ExecRelay } from './relay.js';
import { openRelay } from '../relay.js';
import { AGENTS_GROUP, claimedPodMismatch, claimedSandbox, ClaimObjects, EXTENSIONS_GROUP, isSuspended, LAUNCH_TYPE_LABEL, pickClaimVersion, pickSandboxVersion, POLICY_LABEL, readyCondition, SANDBOX_VERSIONS, sandboxClaimManifest, sandboxClaimName, sandboxManifest, sandboxPodName, SandboxObjects, type ClaimObject, type PodShape, type SandboxObject } from './sandbox-objects.js';
import { ProxyTunnel } from './proxy-tunnel.js';
import { HAND_BACK, hostUsersProblem, podSecurityRefusal, USER_NAMESPACES_NEEDED } from './privileged.js';
import { hostRootProblem } from '../id-map.js';
import { asCopyIn, checkTargets, collectFrom, copyInto, loadCopies, MAX_COPY_BYTES, RELEASES_CONTAINER, releaseVolumeParts, type CopyIn } from './release-volumes.js';
import { newWatchCounters, waitForObjects, type KubeObjectLike, type Verdict, type WatchSource } from './watch.js';
import { IN_CREDHELPER, openTunnel, planTunnel, POD_RUN_DIR, TUNNEL_PROXY_ENV, TUNNEL_PROXY_PORT, type TunnelEnd } from './tunnel.js';

export type { KubernetesExecutorOptions } from './options.js';

/** Where a short-lived Pod takes a collected directory (a build's): its scratch claim's repo sub-path. */
const BUILD_DIR = '/workspace';

/** The daemon's longest exec (its protocol's limit). */
const MAX_EXEC_MS = 86_400_000;

/** Read-only binds of the runner's own code that the workspace image carries at the same path (deploy/kubernetes/workspace.Containerfile). */
export const IMAGE_CARRIES = ['/opt/agent'];

/** What a workspace is made of in this cluster (said once, on first use). */
export type WorkspaceKind = 'pod+pvc' | 'agent-sandbox';

export class KubernetesExecutor implements Executor {
  private readonly clientsReady: Promise<KubeClients>;
  private kc!: KubeClients;
  private readonly relays = new Map<string, ExecRelay>();
  private readonly clients = new Map<string, DaemonClient>();
  /** Workspace id → the Pod its relay reaches (attach()). */
  private readonly pods = new Map<string, string>();
  /** Workspace id → its egress proxy tunnel (dependency-access workspaces only). */
  private readonly proxies = new Map<string, ProxyTunnel>();
  /** rootDir → claim name, for mapping short-lived sandboxes' binds onto a workspace's claim. */
  private readonly roots = new Map<string, { claim: string; pod: string; policy?: string }>();
  /**
   * rootDir → its claim, settled once create() has made it (or failed): a clone the service runs
   * beside create() waits for this instead of guessing the claim's name (a Sandbox's claim is
   * named by its volume claim template).
   */
  private readonly creating = new Map<string, Promise<{ claim: string; pod: string; policy?: string } | undefined>>();
  private kind: Promise<WorkspaceKind> | undefined;
  /** The Sandbox resource, when the cluster serves agent-sandbox (workspaceKind()). */
  private sandboxes: SandboxObjects | undefined;
  /** SandboxClaims, when a warm pool is named and the cluster serves agent-sandbox's extensions (workspaceKind()). */
  private claims: ClaimObjects | undefined;
  /** Workspaces taken from the warm pool and made cold, with the reason when cold (tests, the bench). */
  readonly claimStats = { warm: 0, cold: 0, own: 0 };
  /** Lists and watches made by waits (watch.ts), 410s and drops survived: for tests and the bench. */
  readonly watchCounters = newWatchCounters();

  constructor(
    private readonly o: KubernetesExecutorOptions,
    private readonly onNote: (message: string) => void = () => undefined,
  ) {
    this.clientsReady = connectKube(o).then((k) => (this.kc = k));
    this.clientsReady.catch(() => undefined); // reported by the first operation
  }

  /** The API clients, once loaded (every public operation awaits this first). */
  private get k(): KubeClients {
    return this.kc;
  }

  private get ns(): string {
    return this.o.namespace;
  }

  /**
   * Whether the agent-sandbox CRDs (agents.x-k8s.io) are installed, asked once through discovery
   * and said once: with them a workspace is a `Sandbox` (sandbox-objects.ts) of the newest
   * version the cluster serves; without them a Pod with a PersistentVolumeClaim.
   */
  workspaceKind(): Promise<WorkspaceKind> {
    this.kind ??= (async () => {
      await this.clientsReady;
      const groups = await this.k.apis.getAPIVersions().catch((err: unknown) => {
        throw asServiceError(err, 'discovery');
      });
      const served = groups.groups.find((g) => g.name === AGENTS_GROUP)?.versions.map((v) => v.version) ?? [];
      const version = pickSandboxVersion(served);
      if (version) {
        this.sandboxes = await SandboxObjects.connect(this.k.kc, this.ns, version);
        this.onNote(`kubernetes executor: workspaces are agent-sandbox Sandbox objects (${AGENTS_GROUP}/${version}) with a volume claim template; short-lived sandboxes are plain Pods`);
        if (this.o.warmPool) {
          const ext = groups.groups.find((g) => g.name === EXTENSIONS_GROUP)?.versions.map((v) => v.version) ?? [];
          const cv = pickClaimVersion(ext);
          if (cv) {
            this.claims = await ClaimObjects.connect(this.k.kc, this.ns, cv);
            this.onNote(`kubernetes executor: new workspaces are claimed from the SandboxWarmPool ${this.ns}/${this.o.warmPool} (${EXTENSIONS_GROUP}/${cv} SandboxClaim) when they carry no package releases; otherwise each is a Sandbox of its own`);
          } else {
            this.onNote(`kubernetes executor: the warm pool ${this.o.warmPool} is named but the cluster does not serve ${EXTENSIONS_GROUP} (SandboxClaim); every workspace is a Sandbox of its own`);
          }
        }
        return 'agent-sandbox' as const;
      }
      if (this.o.warmPool) this.onNote(`kubernetes executor: the warm pool ${this.o.warmPool} is named but agent-sandbox is not installed; it is not used`);
      this.onNote(
        served.length > 0
          ? `kubernetes executor: workspaces are Pods with a PersistentVolumeClaim (${AGENTS_GROUP} serves ${served.join(', ')}, none of ${SANDBOX_VERSIONS.join(', ')})`
          : 'kubernetes executor: workspaces are Pods with a PersistentVolumeClaim (no agent-sandbox CRDs in the cluster)',
      );
      return 'pod+pvc' as const;
    })();
    this.kind.catch(() => (this.kind = undefined)); // a failed discovery is asked again next time
    return this.kind;
  }

  /**
   * Which kind this workspace is: a Sandbox when the cluster has them, unless the workspace
   * already has a Pod-path claim (made before the CRDs were installed: its files stay there).
   */
  private async kindOf(id: string): Promise<WorkspaceKind> {
    if ((await this.workspaceKind()) === 'pod+pvc') return 'pod+pvc';
    const podClaim = await orNull(this.k.core.readNamespacedPersistentVolumeClaim({ name: objectName(id), namespace: this.ns }));
    return podClaim ? 'pod+pvc' : 'agent-sandbox';
  }

  /** Follows objects by list+watch until `judge` decides or the deadline passes (watch.ts). */
  private waitFor<T>(sources: WatchSource<KubeObjectLike>[], judge: (objects: Array<KubeObjectLike | null | undefined>) => Verdict<T>, deadline: number, timeout: (objects: Array<KubeObjectLike | null | undefined>) => ServiceError): Promise<T> {
    return waitForObjects({ watch: this.k.watch, sources, judge, deadline, timeout, counters: this.watchCounters });
  }

  private podSource(name: string, from?: KubeObjectLike): WatchSource<KubeObjectLike> {
    return {
      path: `/api/v1/namespaces/${this.ns}/pods`,
      name,
      from,
      list: async (fieldSelector) => {
        const l = await this.k.core.listNamespacedPod({ namespace: this.ns, fieldSelector });
        return { object: l.items[0] ?? null, resourceVersion: l.metadata?.resourceVersion ?? '' };
      },
    };
  }

  private claimSource(name: string): WatchSource<KubeObjectLike> {
    return {
      path: `/api/v1/namespaces/${this.ns}/persistentvolumeclaims`,
      name,
      list: async (fieldSelector) => {
        const l = await this.k.core.listNamespacedPersistentVolumeClaim({ namespace: this.ns, fieldSelector });
        return { object: l.items[0] ?? null, resourceVersion: l.metadata?.resourceVersion ?? '' };
      },
    };
  }

  private sandboxSource(name: string, from?: SandboxObject): WatchSource<KubeObjectLike> {
    const sb = this.sandboxes!;
    return { path: sb.path, name, from, list: (fieldSelector) => sb.list(fieldSelector) };
  }

  private relayPath(id: string): string {
    return path.join(this.o.runDir, `${createHash('sha256').update(id).digest('hex').slice(0, 16)}.sock`);
  }

  async create(spec: SandboxSpec): Promise<SandboxHandle> {
    const root = path.resolve(spec.rootDir);
    let settle!: (v: { claim: string; pod: string; policy?: string } | undefined) => void;
    const made = new Promise<{ claim: string; pod: string; policy?: string } | undefined>((resolve) => (settle = resolve));
    this.creating.set(root, made);
    try {
      const h = await this.createIn(spec, () => settle(this.roots.get(root)));
      await this.setProxy(spec.id, spec.network);
      return h;
    } finally {
      settle(this.roots.get(root));
      if (this.creating.get(root) === made) this.creating.delete(root);
    }
  }

  /** create(); `claimReady` is called once the workspace's claim exists (or its Sandbox, which makes it). */
  private async createIn(spec: SandboxSpec, claimReady: () => void): Promise<SandboxHandle> {
    await this.clientsReady;
    validateId(spec.id);
    const copies = await this.copiesOf(spec.mounts ?? [], 'mounts');
    if ((await this.kindOf(spec.id)) === 'agent-sandbox') return this.createSandbox(spec, copies, claimReady);
    const name = objectName(spec.id);
    this.roots.set(path.resolve(spec.rootDir), { claim: name, pod: name });
    await createOrKeep(this.k.core.createNamespacedPersistentVolumeClaim({ namespace: this.ns, body: claimManifest(name, spec.id, this.o) }));
    claimReady();
    await this.applyPolicy(name, spec.id, spec.network);
    const existing = await orNull(this.k.core.readNamespacedPod({ name, namespace: this.ns }));
    let replace = !!existing && (!!existing.metadata?.deletionTimestamp || existing.status?.phase === 'Succeeded' || existing.status?.phase === 'Failed');
    if (existing && !replace) {
      const h = await this.recover(spec);
      if (h) return h;
      replace = true;
    }
    if (replace) {
      // The new Pod takes the same name: the old one must be gone (a graceful deletion or a finalizer can keep it a while).
      await this.deletePod(name);
      await this.waitGone(this.podSource(name), 'pod', Date.now() + (this.o.startTimeoutMs ?? 120_000));
    }
    const body = daemonPodManifest({ name, id: spec.id, role: WORKSPACE_ROLE, claim: name, limits: spec.limits, env: spec.env, o: this.o, copies: releaseVolumeParts(copies, this.o) });
    const created = await this.k.core.createNamespacedPod({ namespace: this.ns, body }).catch((err: unknown) => {
      throw asServiceError(err, 'create pod');
    });
    await this.fill(name, copies);
    return this.attach(spec.id, name, created, this.podPlacement(name));
  }

  /** Watches an object until it is gone (deleted), at most until the deadline. */
  private waitGone(src: WatchSource<KubeObjectLike>, kind: 'pod' | 'sandbox' | 'sandboxclaim', deadline: number): Promise<void> {
    return this.waitFor([src], ([o]) => (o === null ? { done: undefined } : undefined), deadline, () => new ServiceError('DEADLINE_EXCEEDED', `${kind} ${this.ns}/${src.name} is still being deleted`, { [kind]: src.name }));
  }

  /** What a workspace on the Pod path is (SandboxHandle.placement). */
  private podPlacement(pod: string): SandboxPlacement {
    return { kind: 'kubernetes-pod', apiVersion: 'v1', objectKind: 'Pod', namespace: this.ns, name: pod, pod };
  }

  /** What a workspace that is a Sandbox is (SandboxHandle.placement). */
  private sandboxPlacement(name: string, pod: string): SandboxPlacement {
    return { kind: 'kubernetes-sandbox', apiVersion: `${AGENTS_GROUP}/${this.sandboxes!.version}`, objectKind: 'Sandbox', namespace: this.ns, name, pod };
  }

  /**
   * The read-only directory binds (or mounts) that are copied into a Pod (release-volumes.ts);
   * any other is refused naming the driver and the target.
   */
  private async copiesOf(binds: EphemeralBind[], field: string): Promise<CopyIn[]> {
    const copies: CopyIn[] = [];
    for (const b of binds) {
      const c = await asCopyIn(b);
      if (!c) throw new ServiceError('NOT_SUPPORTED', `${field}: ${b.target}: the kubernetes executor copies into a Pod only read-only directories at a path outside its own layout (/workspace, /home/user, /tmp, /opt/atelier...)`, { field, target: b.target, driver: 'kubernetes' });
      copies.push(c);
    }
    checkTargets(copies, field);
    return copies;
  }

  /** Copies the runner's read-only directories into the Pod before its main container starts (nothing to do without any). */
  private async fill(pod: string, copies: CopyIn[]): Promise<void> {
    if (!copies.length) return;
    const s = await loadCopies(this.k.core, this.k.exec, this.ns, pod, copies, Date.now() + (this.o.startTimeoutMs ?? 120_000));
    this.copyStats.pods++;
    this.copyStats.bytes += s.bytes;
    this.copyStats.ms += s.ms;
  }

  /** What copying releases into Pods has cost so far (tests, the bench). */
  readonly copyStats = { pods: 0, bytes: 0, ms: 0 };

  /**
   * create() as a Sandbox: its NetworkPolicy first (the Pod never runs without it), then the
   * Sandbox (or the existing one resumed, its pod template brought up to date), then its Pod
   * running (the controller makes it) and the daemon's ping through the relay, as on the Pod path.
   * Release copies: the pod template carries their init container, emptyDir and read-only mounts;
   * whenever the Pod the controller made waits in that init container (a new Sandbox, a resumed
   * one, a Pod made again, one a runner gone mid-copy left), the runner fills it as on the Pod path.
   */
  private async createSandbox(spec: SandboxSpec, copies: CopyIn[], claimReady: () => void = () => undefined): Promise<SandboxHandle> {
    const name = objectName(spec.id);
    if (this.claims) {
      // A workspace claimed before (its claim is kept while it lives) is resumed or recovered through the claim.
      const existing = await this.claims.get(name);
      if (existing && !existing.metadata.deletionTimestamp) return this.createClaimed(spec, existing, claimReady);
      if (existing) await this.waitGone(this.claimObjectSource(name, existing), 'sandboxclaim', Date.now() + (this.o.startTimeoutMs ?? 120_000));
      if (!copies.length && !(await this.sandboxes!.get(name))) {
        const h = await this.claimNew(spec, claimReady);
        if (h) return h;
      } else if (copies.length) {
        this.onNote(`workspace ${spec.id}: a Sandbox of its own (cold), not claimed from the warm pool: it has package releases, which are copied in before its daemon starts`);
      }
    }
    return this.createOwnSandbox(spec, copies, claimReady);
  }

  /**
   * A new workspace from the warm pool: its NetworkPolicy first, then a SandboxClaim (the
   * workspace's labels and the policy label as additionalPodMetadata); the claim controller adopts
   * a Ready warm Sandbox or makes one from the pool's template (cold). The runner then uses that
   * Sandbox's Pod once it runs and carries the policy label (createClaimed). Undefined (the caller
   * makes a Sandbox of its own) when the claim names no Sandbox within claimWaitMs (no such pool,
   * a controller that is not running) or the Pod is not what this workspace's would be (the claim
   * is deleted, and its Sandbox with it). Logs which was used.
   */
  private async claimNew(spec: SandboxSpec, claimReady: () => void): Promise<SandboxHandle | undefined> {
    const name = objectName(spec.id);
    const claims = this.claims!;
    await this.applyPolicy(name, spec.id, spec.network);
    let made: ClaimObject | null;
    try {
      made = (await claims.create(sandboxClaimManifest({ name, id: spec.id, pool: this.o.warmPool!, version: claims.version }))) ?? (await claims.get(name));
    } catch (err) {
      // A Role without sandboxclaims (an older rbac.yaml): the workspace still opens, on a Sandbox of its own.
      if ((err as ServiceError).details?.kubernetesStatus !== 403) throw err;
      this.onNote(`workspace ${spec.id}: a Sandbox of its own (cold), not claimed from the warm pool ${this.o.warmPool}: the runner may not create sandboxclaims in ${this.ns} (403; deploy/kubernetes/rbac.yaml grants create, get, list, watch and delete on sandboxclaims.${EXTENSIONS_GROUP})`);
      return undefined;
    }
    if (!made) return undefined;
    const waitMs = Math.min(this.o.claimWaitMs ?? 10_000, this.o.startTimeoutMs ?? 120_000);
    const named = await this.waitFor<string>(
      [this.claimObjectSource(name, made)],
      ([c]) => (c === null ? { fail: new ServiceError('UNAVAILABLE', `sandboxclaim ${name} is gone`, { sandboxclaim: name }) } : c && claimedSandbox(c as ClaimObject) ? { done: claimedSandbox(c as ClaimObject)! } : undefined),
      Date.now() + waitMs,
      ([c]) => new ServiceError('DEADLINE_EXCEEDED', `sandboxclaim ${name} named no Sandbox within ${waitMs} ms (${claimCondition(c as ClaimObject | undefined)})`, { sandboxclaim: name }),
    ).catch((err: unknown) => err as ServiceError);
    if (named instanceof Error) {
      this.onNote(`workspace ${spec.id}: a Sandbox of its own (cold), not claimed from the warm pool ${this.o.warmPool}: ${named.message}`);
      await this.dropClaim(name);
      return undefined;
    }
    try {
      return await this.createClaimed(spec, made, claimReady, true);
    } catch (err) {
      if (!(err instanceof ClaimMismatch)) throw err;
      this.onNote(`workspace ${spec.id}: a Sandbox of its own (cold), not claimed from the warm pool ${this.o.warmPool}: ${err.message}`);
      await this.detach(spec.id);
      await this.dropClaim(name);
      return undefined;
    }
  }

  /** Deletes a claim (its Sandbox goes with it) and waits until it is gone. */
  private async dropClaim(name: string): Promise<void> {
    await this.claims!.delete(name);
    await this.waitGone(this.claimObjectSource(name), 'sandboxclaim', Date.now() + (this.o.startTimeoutMs ?? 120_000));
  }

  /**
   * A workspace through its claim: the Sandbox the claim names (resumed when suspended; its Pod
   * made again when it ended), its Pod running with the policy label (the workspace's
   * NetworkPolicy selects it before the runner sends anything), checked against what this
   * workspace's Pod would be (`fresh`: a mismatch is a ClaimMismatch), attached, and the commands'
   * environment given to the daemon (env.set: a warm Pod started before the workspace was known).
   */
  private async createClaimed(spec: SandboxSpec, claim: ClaimObject, claimReady: () => void, fresh = false): Promise<SandboxHandle> {
    const name = objectName(spec.id);
    const deadline = Date.now() + (this.o.startTimeoutMs ?? 120_000);
    let sbName = claimedSandbox(claim);
    if (!sbName) {
      sbName = await this.waitFor<string>(
        [this.claimObjectSource(name, claim)],
        ([c]) => (c === null ? { fail: new ServiceError('UNAVAILABLE', `sandboxclaim ${name} is gone`, { sandboxclaim: name }) } : c && claimedSandbox(c as ClaimObject) ? { done: claimedSandbox(c as ClaimObject)! } : undefined),
        deadline,
        ([c]) => new ServiceError('DEADLINE_EXCEEDED', `sandboxclaim ${this.ns}/${name} named no Sandbox in time (${claimCondition(c as ClaimObject | undefined)})`, { sandboxclaim: name }),
      );
    }
    const root = path.resolve(spec.rootDir);
    // A fresh claim's Sandbox is the workspace's only once its Pod passed the check below (a clone waits until then).
    if (!fresh) {
      this.roots.set(root, { claim: sandboxClaimName(sbName), pod: sbName, policy: name });
      claimReady();
      await this.applyPolicy(name, spec.id, spec.network);
    }
    const sb = await this.sandboxes!.get(sbName);
    if (!sb || sb.metadata.deletionTimestamp) throw new ServiceError('UNAVAILABLE', `sandbox ${sbName} of sandboxclaim ${name} is gone`, { sandbox: sbName, sandboxclaim: name });
    const launch = sb.metadata.labels?.[LAUNCH_TYPE_LABEL] === 'warm' ? 'warm' : 'cold';
    const placement = { ...this.sandboxPlacement(sbName, sandboxPodName(sb)), claim: { name, pool: claim.spec.warmPoolRef.name, launch } as const };
    if (isSuspended(sb)) {
      await this.sandboxes!.setRunning(sbName, true);
    } else if (!fresh) {
      const h = await this.recover(spec);
      if (h) return h;
      const p = await orNull(this.k.core.readNamespacedPod({ name: sandboxPodName(sb), namespace: this.ns }));
      const phase = p && !p.metadata?.deletionTimestamp ? p.status?.phase : undefined;
      if (phase === 'Running' || phase === 'Succeeded' || phase === 'Failed' || phase === 'Unknown') await this.deletePod(sandboxPodName(sb));
    }
    const { pod } = await this.waitSandboxPod(sbName, deadline, undefined, undefined, name);
    const want = daemonPodManifest({ name, id: spec.id, role: WORKSPACE_ROLE, claim: sandboxClaimName(sbName), limits: spec.limits, o: this.o });
    const p = await orNull(this.k.core.readNamespacedPod({ name: pod, namespace: this.ns }));
    const why = p ? claimedPodMismatch(p as PodShape, sbName, want) : 'its Pod is gone';
    if (why) {
      if (fresh) throw new ClaimMismatch(`the Sandbox ${sbName} it got is not this workspace's: ${why}`);
      throw new ServiceError('FAILED_PRECONDITION', `sandboxclaim ${name}: the Pod ${pod} of its Sandbox ${sbName} is not this workspace's: ${why}`, { sandboxclaim: name, pod });
    }
    if (fresh) {
      this.roots.set(root, { claim: sandboxClaimName(sbName), pod: sbName, policy: name });
      claimReady();
    }
    const h = await this.attach(spec.id, pod, false, { ...placement, pod });
    await this.giveEnv(h, spec.env);
    if (fresh) {
      this.claimStats[launch]++;
      this.onNote(`workspace ${spec.id}: claimed the Sandbox ${sbName} from the warm pool ${claim.spec.warmPoolRef.name} (${launch === 'warm' ? 'warm: its Pod started before the open' : 'cold: the pool had no Ready Sandbox, the claim made one from its template'})`);
    }
    return h;
  }

  /** The commands' environment to the daemon (env.set), as a Pod of its own takes it at start (ATELIER_ENV_JSON). */
  private async giveEnv(h: SandboxHandle, env: Record<string, string> | undefined): Promise<void> {
    await this.client(h).request('env.set', { env: workspaceCommandEnv(env) }, { timeoutMs: 30_000 });
  }

  private claimObjectSource(name: string, from?: ClaimObject): WatchSource<KubeObjectLike> {
    const c = this.claims!;
    return { path: c.path, name, from: from as KubeObjectLike | undefined, list: (fieldSelector) => c.list(fieldSelector) };
  }

  /** create() as a Sandbox of the workspace's own (named as its objects), as before warm pools. */
  private async createOwnSandbox(spec: SandboxSpec, copies: CopyIn[], claimReady: () => void): Promise<SandboxHandle> {
    const sb = this.sandboxes!;
    const name = objectName(spec.id);
    const deadline = Date.now() + (this.o.startTimeoutMs ?? 120_000);
    if (this.claims) this.claimStats.own++;
    this.roots.set(path.resolve(spec.rootDir), { claim: sandboxClaimName(name), pod: name });
    await this.applyPolicy(name, spec.id, spec.network);
    const body = sandboxManifest({ name, id: spec.id, version: sb.version, limits: spec.limits, env: spec.env, o: this.o, copies: releaseVolumeParts(copies, this.o) });
    let existing = await sb.get(name);
    let known: SandboxObject | undefined;
    if (existing?.metadata.deletionTimestamp) {
      // A destroy still under way: a new Sandbox of the same name waits for it to go (watched).
      await this.waitGone(this.sandboxSource(name, existing), 'sandbox', deadline);
      existing = null;
    }
    if (!existing) {
      known = (await sb.create(body)) ?? undefined;
      claimReady();
    } else if (isSuspended(existing)) {
      await sb.setRunning(name, true, body.spec.podTemplate);
      claimReady();
    } else {
      claimReady();
      const h = await this.recover(spec);
      if (h) return h;
      const p = await orNull(this.k.core.readNamespacedPod({ name: sandboxPodName(existing), namespace: this.ns }));
      const phase = p && !p.metadata?.deletionTimestamp ? p.status?.phase : undefined;
      if (phase === 'Running' || phase === 'Succeeded' || phase === 'Failed' || phase === 'Unknown') {
        // Its Pod ended (the daemon's orphan grace) or runs without an answering daemon: the
        // controller makes a new one from the pod template brought up to date here.
        await sb.setRunning(name, true, body.spec.podTemplate);
        await this.deletePod(sandboxPodName(existing));
      }
      // Otherwise its Pod is still starting (or being made, or waits for its copies): wait for it as for a new one.
    }
    if (copies.length) {
      // The Pod waits in its releases init container (filled here), or runs already (filled before: the init container ends only once filled).
      const { pod, filling } = await this.waitSandboxPod(name, deadline, known, RELEASES_CONTAINER);
      if (filling) await this.fill(pod, copies);
    }
    const { pod } = await this.waitSandboxPod(name, deadline, known);
    this.roots.set(path.resolve(spec.rootDir), { claim: sandboxClaimName(name), pod });
    return this.attach(spec.id, pod, false, this.sandboxPlacement(name, pod));
  }

  /**
   * Watches the Sandbox and its Pod (list+watch each, watch.ts) until the Pod runs; the
   * controller makes the Pod, so an absent one is waited for. A Pod that ended ends the wait, as
   * does the Sandbox's deletion. `known`: the Sandbox as just created (watched from its version).
   * `init`: also done (filling: true) once that init container of the Pod runs.
   */
  private async waitSandboxPod(name: string, deadline: number, known?: SandboxObject, init?: string, policy?: string): Promise<{ pod: string; filling: boolean }> {
    const gone = () => new ServiceError('UNAVAILABLE', `sandbox ${name} is gone`, { sandbox: name });
    const s0 = known ?? (await this.sandboxes!.get(name));
    if (!s0 || s0.metadata.deletionTimestamp) throw gone();
    // The Pod's name is fixed when the Sandbox is made (its own, or a warm-pool Pod's in the annotation).
    const podName = sandboxPodName(s0);
    return this.waitFor<{ pod: string; filling: boolean }>(
      [this.sandboxSource(name, s0), this.podSource(podName)],
      ([s, p]) => {
        if (s === null || s?.metadata?.deletionTimestamp) return { fail: gone() };
        if (p === undefined) return undefined;
        const live = p && !p.metadata?.deletionTimestamp ? (p as PodLike) : undefined;
        const phase = live?.status?.phase;
        // A claimed Pod: not before it carries the policy label its workspace's NetworkPolicy selects.
        if (phase === 'Running' && (!policy || (live?.metadata as { labels?: Record<string, string> } | undefined)?.labels?.[POLICY_LABEL] === policy)) return { done: { pod: podName, filling: false } };
        if (init && live?.status?.initContainerStatuses?.some((c) => c.name === init && c.state?.running)) return { done: { pod: podName, filling: true } };
        if (phase === 'Failed' || phase === 'Succeeded') {
          const message = (p as PodLike).status?.message;
          return { fail: new ServiceError('FAILED_PRECONDITION', `pod ${podName} of sandbox ${name} ended before its daemon answered (${phase}${message ? `: ${message}` : ''})`, { sandbox: name, pod: podName, phase }) };
        }
        return undefined;
      },
      deadline,
      ([s, p]) => {
        const ready = s ? readyCondition(s as SandboxObject) : undefined;
        const phase = p ? podPhaseNote(p as PodLike) : p === null ? 'no pod yet' : 'unknown';
        return new ServiceError('DEADLINE_EXCEEDED', `the pod ${podName} of sandbox ${this.ns}/${name} was not running within ${Math.round((this.o.startTimeoutMs ?? 120_000) / 1000)} s (pod: ${phase}; sandbox: ${ready ? `Ready ${ready.status}, ${ready.reason ?? ''}${ready.message ? `: ${ready.message}` : ''}` : 'no Ready condition yet'})`, { sandbox: name, pod: podName, reason: ready?.reason ?? null });
      },
    );
  }

  /**
   * Waits for the Pod to run (`created`: the create's answer, watched from its version; false:
   * it runs already), opens the relay and waits for the daemon's ping.
   */
  private async attach(id: string, pod: string, created: V1Pod | false, placement?: SandboxPlacement): Promise<SandboxHandle> {
    const deadline = Date.now() + (this.o.startTimeoutMs ?? 120_000);
    if (created) await this.waitRunning(pod, deadline, created);
    const socketPath = this.relayPath(id);
    await this.relays.get(id)?.close();
    this.clients.get(id)?.close();
    const relay = await ExecRelay.listen(socketPath, this.k.exec, this.ns, pod);
    this.relays.set(id, relay);
    this.pods.set(id, pod);
    const client = new DaemonClient(socketPath, { connectTimeoutMs: 30_000 });
    this.clients.set(id, client);
    for (let delay = 100; ; delay = Math.min(delay * 2, 2_000)) {
      try {
        await client.ping(10_000);
        break;
      } catch (err) {
        client.close();
        if (Date.now() > deadline) throw new ServiceError('UNAVAILABLE', `the daemon in pod ${pod} did not answer in time`, { pod, cause: err instanceof Error ? err.message : String(err) });
        await sleep(delay);
      }
    }
    return { id, socketPath, pid: -1, ...(placement ? { placement } : {}) };
  }

  /**
   * Watches the Pod (from `created`, the create's answer: no first list; list+watch after a 410
   * or a dropped watch, watch.ts) until it runs; Failed or Succeeded ends the wait, as does its
   * deletion; at the deadline the error names the Pod and its last phase.
   */
  private waitRunning(pod: string, deadline: number, created: V1Pod): Promise<void> {
    return this.waitFor(
      [this.podSource(pod, created as KubeObjectLike)],
      ([p]) => {
        if (p === undefined) return undefined;
        const phase = (p as PodLike | null)?.status?.phase;
        if (p && phase === 'Running') return { done: undefined };
        if (phase === 'Failed' || phase === 'Succeeded') {
          const message = (p as PodLike).status?.message;
          return { fail: new ServiceError('FAILED_PRECONDITION', `pod ${pod} ended before its daemon answered (${phase}${message ? `: ${message}` : ''})`, { pod, phase }) };
        }
        if (!p) return { fail: new ServiceError('UNAVAILABLE', `pod ${pod} is gone`, { pod }) };
        return undefined;
      },
      deadline,
      ([p]) => {
        const phase = (p as PodLike | null | undefined)?.status?.phase ?? null;
        return new ServiceError('DEADLINE_EXCEEDED', `pod ${this.ns}/${pod} was not running within ${Math.round((this.o.startTimeoutMs ?? 120_000) / 1000)} s (last ${p ? podPhaseNote(p as PodLike) : 'phase unknown'})`, { pod, phase });
      },
    );
  }

  private async applyPolicy(name: string, id: string, network: SandboxNetwork): Promise<void> {
    const body = networkPolicyManifest(name, id, network);
    const created = await createOrKeep(this.k.net.createNamespacedNetworkPolicy({ namespace: this.ns, body }));
    if (!created) {
      await this.k.net.replaceNamespacedNetworkPolicy({ name, namespace: this.ns, body }).catch((err: unknown) => {
        throw asServiceError(err, 'replace networkpolicy');
      });
    }
  }

  private client(h: SandboxHandle): DaemonClient {
    let c = this.clients.get(h.id);
    if (!c) {
      c = new DaemonClient(h.socketPath, { connectTimeoutMs: 30_000 });
      this.clients.set(h.id, c);
    }
    return c;
  }

  async exec(h: SandboxHandle, req: ExecRequest, onOutput?: (stream: 'stdout' | 'stderr', chunk: Buffer) => void, signal?: AbortSignal): Promise<ExecResult> {
    const params = execParams(req, onOutput !== undefined);
    const onEvent = (event: string, data: unknown): void => {
      if ((event === 'stdout' || event === 'stderr') && typeof data === 'string') onOutput?.(event, Buffer.from(data, 'base64'));
    };
    const safetyMs = (req.timeoutMs ?? 60_000) + (req.killGraceMs ?? 0) + 30_000;
    return this.client(h).request('exec', params, { onEvent, signal, timeoutMs: safetyMs });
  }

  request<M extends DaemonMethod>(h: SandboxHandle, method: M, params: ParamsOf<M>, opts: { signal?: AbortSignal; timeoutMs?: number; onEvent?: (event: string, data: unknown) => void } = {}): Promise<ReplyOf<M>> {
    if (method === 'exec' || method === 'release' || method === 'spare') throw new ServiceError('INVALID_ARGUMENT', `use exec() for ${method}`);
    if (method === 'fs.read') {
      // No descriptor handoff across a cluster: the bytes come in the reply.
      const { handOff: _h, release: _r, ...plain } = params as ParamsOf<'fs.read'>;
      return this.client(h).request(method, plain as ParamsOf<M>, opts);
    }
    return this.client(h).request(method, params, opts);
  }

  /**
   * Preview URLs (issue #33): the daemon's relay mode (../relay.ts, daemon/relay.ts) through a new
   * connection to the runner-local relay socket, so one exec stream running the stdio bridge in the
   * Pod: a byte pipe to 127.0.0.1:<port> inside the Pod, checked by the daemon as under
   * bubblewrap. The Pod keeps no inbound network (its NetworkPolicy denies ingress).
   */
  relay(h: SandboxHandle, port: number): Promise<import('node:net').Socket> {
    return openRelay(h.socketPath, port);
  }

  private async deletePod(name: string): Promise<void> {
    await deleteIfPresent(this.k.core.deleteNamespacedPod({ name, namespace: this.ns, gracePeriodSeconds: 0 }));
  }

  private async detach(id: string): Promise<void> {
    this.proxies.get(id)?.close();
    this.proxies.delete(id);
    this.pods.delete(id);
    this.clients.get(id)?.close();
    this.clients.delete(id);
    await this.relays.get(id)?.close();
    this.relays.delete(id);
  }

  /** The workspace's Sandbox, when it is one (agent-sandbox installed and the object exists). */
  private async sandboxOf(id: string): Promise<SandboxObject | null> {
    return (await this.sandboxAndClaimOf(id)).sb;
  }

  /**
   * The workspace's Sandbox and, when it was claimed from the warm pool, its claim (atl-<hash>,
   * the Sandbox the claim names); else the Sandbox named as the workspace's objects.
   */
  private async sandboxAndClaimOf(id: string): Promise<{ sb: SandboxObject | null; claim?: ClaimObject }> {
    if ((await this.workspaceKind()) !== 'agent-sandbox') return { sb: null };
    const claim = this.claims ? await this.claims.get(objectName(id)) : null;
    if (claim) {
      const n = claimedSandbox(claim);
      return { sb: n ? await this.sandboxes!.get(n) : null, claim };
    }
    return { sb: await this.sandboxes!.get(objectName(id)) };
  }

  /** The Pod path: delete the Pod. A Sandbox: suspend it (the claim stays) and delete its Pod now. */
  async stop(h: SandboxHandle): Promise<void> {
    await this.clientsReady;
    await this.detach(h.id);
    const sb = await this.sandboxOf(h.id);
    if (sb) await this.sandboxes!.setRunning(sb.metadata.name, false);
    await this.deletePod(sb ? sandboxPodName(sb) : objectName(h.id));
  }

  async alive(h: SandboxHandle): Promise<boolean> {
    await this.clientsReady;
    if (this.clients.get(h.id)?.connected) return true;
    const p = await orNull(this.k.core.readNamespacedPod({ name: h.placement?.pod ?? objectName(h.id), namespace: this.ns })).catch(() => null);
    return !!p && p.status?.phase === 'Running' && !p.metadata?.deletionTimestamp;
  }

  /** The Pod, its NetworkPolicy and its claim (the workspace's files live in the claim). */
  async destroy(h: SandboxHandle): Promise<void> {
    await this.clientsReady;
    const name = objectName(h.id);
    await this.stop(h);
    const { sb: own, claim } = await this.sandboxAndClaimOf(h.id);
    if (claim) {
      // Its Sandbox (and so its Pod and the claim of its files) goes with the SandboxClaim; the files' claim is deleted here too.
      const sbName = claimedSandbox(claim);
      await this.claims!.delete(claim.metadata.name);
      if (sbName) await deleteIfPresent(this.k.core.deleteNamespacedPersistentVolumeClaim({ name: sandboxClaimName(sbName), namespace: this.ns }));
      for (const [root, v] of this.roots) if (sbName && v.claim === sandboxClaimName(sbName)) this.roots.delete(root);
    } else if (own) {
      // Its Pod and claim go with it (owner references); the claim is deleted here too, so the
      // files are gone whatever the garbage collector's pace.
      await this.sandboxes!.delete(name);
      await deleteIfPresent(this.k.core.deleteNamespacedPersistentVolumeClaim({ name: sandboxClaimName(name), namespace: this.ns }));
    }
    await deleteIfPresent(this.k.net.deleteNamespacedNetworkPolicy({ name, namespace: this.ns }));
    await deleteIfPresent(this.k.core.deleteNamespacedPersistentVolumeClaim({ name, namespace: this.ns }));
    for (const [root, v] of this.roots) if (v.claim === name || v.claim === sandboxClaimName(name)) this.roots.delete(root);
  }

  async recover(spec: SandboxSpec): Promise<SandboxHandle | null> {
    await this.clientsReady;
    validateId(spec.id);
    const name = objectName(spec.id);
    let pod = name;
    let claim = name;
    const { sb, claim: sbClaim } = await this.sandboxAndClaimOf(spec.id);
    if (sbClaim && !sb) return null;
    let placement = this.podPlacement(pod);
    if (sb) {
      if (sb.metadata.deletionTimestamp || isSuspended(sb)) return null;
      pod = sandboxPodName(sb);
      claim = sandboxClaimName(sb.metadata.name);
      placement = this.sandboxPlacement(sb.metadata.name, pod);
      if (sbClaim) placement = { ...placement, claim: { name, pool: sbClaim.spec.warmPoolRef.name, launch: sb.metadata.labels?.[LAUNCH_TYPE_LABEL] === 'warm' ? 'warm' : 'cold' } };
    }
    const p = await orNull(this.k.core.readNamespacedPod({ name: pod, namespace: this.ns }));
    if (!p || p.status?.phase !== 'Running' || p.metadata?.deletionTimestamp) return null;
    // A claimed Pod not (or no longer) selected by the workspace's NetworkPolicy is not reattached.
    if (sbClaim && p.metadata?.labels?.[POLICY_LABEL] !== name) return null;
    try {
      const h = await this.attach(spec.id, pod, false, placement);
      // The daemon of a claimed Pod kept its environment; given again, it is the runner's current one.
      if (sbClaim) await this.giveEnv(h, spec.env);
      this.roots.set(path.resolve(spec.rootDir), { claim, pod, policy: name });
      await this.setProxy(spec.id, spec.network);
      return h;
    } catch {
      await this.detach(spec.id);
      return null;
    }
  }

  /** Memory and CPU from the metrics API; pids are not reported there (0). */
  async stats(h: SandboxHandle): Promise<SandboxStats> {
    await this.clientsReady;
    const name = h.placement?.pod ?? objectName(h.id);
    const list = await this.k.metrics.getPodMetrics(this.ns).catch((err: unknown) => {
      throw asServiceError(err, 'metrics');
    });
    const m = list.items.find((i) => i.metadata.name === name);
    if (!m) throw new ServiceError('UNAVAILABLE', `no metrics for pod ${name} yet`, { pod: name });
    let memoryBytes = 0;
    let cpuNanocores = 0;
    for (const c of m.containers) {
      memoryBytes += quantity(c.usage.memory);
      cpuNanocores += quantity(c.usage.cpu) * 1e9;
    }
    // The metrics API gives a rate (cores over its window), not a running total: this reports
    // the rate over one second, so a total built from successive samples stays an estimate.
    return { memoryBytes, pids: 0, cpuUsageNs: Math.round(cpuNanocores) };
  }

  /**
   * No restart: the Pod's policy stays deny-all (its annotation says the network) and the proxy
   * variables are always set; dependency-access opens the egress proxy tunnel, none closes it
   * (nothing listens at 127.0.0.1:3128 in the Pod any more).
   */
  async setNetworkPolicy(h: SandboxHandle, network: SandboxNetwork): Promise<void> {
    await this.clientsReady;
    await this.applyPolicy(objectName(h.id), h.id, network);
    await this.setProxy(h.id, network);
  }

  /**
   * The workspace's egress proxy tunnel as its network asks: open to its Pod for dependency-access
   * (kept when it already reaches that Pod and socket), closed for none.
   */
  private async setProxy(id: string, network: SandboxNetwork): Promise<void> {
    const cur = this.proxies.get(id);
    const pod = this.pods.get(id);
    if (cur && network !== 'none' && cur.pod === pod && cur.proxySocket === network.proxySocket) return;
    cur?.close();
    this.proxies.delete(id);
    if (network === 'none' || !pod) return;
    this.proxies.set(id, await ProxyTunnel.open(this.k.exec, this.ns, pod, network.proxySocket, this.onNote));
  }

  /** The egress proxy tunnel of a workspace, if it has one (tests: its counters and opens). */
  proxyTunnel(id: string): ProxyTunnel | undefined {
    return this.proxies.get(id);
  }

  /** Runner sockets and files in short-lived Pods go under the Pod's own /dev/shm/atelier (tunnel.ts). */
  readonly ephemeralLayout: EphemeralLayout = {
    buildDir: BUILD_DIR,
    credSocketDir: `${POD_RUN_DIR}/cred`,
    caFile: `${POD_RUN_DIR}/ca.pem`,
    credentialHelper: (socket: string) => `node ${IN_CREDHELPER} ${socket}`,
    agentSocketDir: `${POD_RUN_DIR}/agent`,
  };

  /**
   * The workspace claim a host path of a workspace's root maps onto: <rootDir>/repo (home, tmp)
   * of a workspace this runner made or recovered, or of <workspacesDir>/<id> (the service's
   * layout: a clone runs while the workspace's Pod is still being made).
   */
  private async claimFor(src: string): Promise<{ claim: string; pod?: string; id?: string; policy?: string } | undefined> {
    const known = this.roots.get(path.dirname(src)) ?? (await this.creating.get(path.dirname(src)));
    if (known) return known;
    const root = path.dirname(src);
    const id = path.basename(root);
    if (this.o.workspacesDir && path.dirname(root) === path.resolve(this.o.workspacesDir) && /^[A-Za-z0-9_-]{1,100}$/.test(id)) return this.claimOfUnknown(id, root);
    return undefined;
  }

  /**
   * The claim of a workspace this runner neither made, recovered nor is making: on the Pod path
   * its claim by name (made by the caller when absent: a clone the service starts just before the
   * workspace's own create()); with agent-sandbox, its Pod-path claim when it has one (made before
   * the CRDs were installed), else its Sandbox's claim, waited for (watched) when absent: the
   * workspace's create() makes the Sandbox, whose controller makes the claim. Making a Pod-path
   * claim there would turn the workspace into a Pod (kindOf()).
   */
  private async claimOfUnknown(id: string, root: string): Promise<{ claim: string; pod?: string; id?: string; policy?: string }> {
    const name = objectName(id);
    if ((await this.workspaceKind()) === 'pod+pvc') return { claim: name, id };
    if (await orNull(this.k.core.readNamespacedPersistentVolumeClaim({ name, namespace: this.ns }))) return { claim: name, pod: name };
    const claim = sandboxClaimName(name);
    const deadline = Date.now() + (this.o.startTimeoutMs ?? 120_000);
    const timeout = () => new ServiceError('DEADLINE_EXCEEDED', `the claim ${claim} of workspace ${id} did not appear in time (its Sandbox was not made)`, { claim, workspace: id });
    if (this.claims) {
      // Claimed from the warm pool, its files are in the claim of the Sandbox its SandboxClaim names
      // (atl-<hash> names the claim). Only this runner's create() makes that claim: when it is
      // under way, its answer is the one (it gives a claimed Sandbox back when its Pod does not
      // match, and the workspace's files then go to a Sandbox of its own).
      const seen = await this.waitFor<{ claim: string; pod: string; policy: string }>(
        [this.claimSource(claim), this.claimObjectSource(name)],
        ([pvc, c]) => {
          const sbName = c ? claimedSandbox(c as ClaimObject) : undefined;
          if (sbName) return { done: { claim: sandboxClaimName(sbName), pod: sbName, policy: name } };
          if (pvc && !c) return { done: { claim, pod: name, policy: name } };
          return undefined;
        },
        deadline,
        timeout,
      );
      return (await this.creating.get(root)) ?? this.roots.get(root) ?? seen;
    }
    await this.waitFor([this.claimSource(claim)], ([c]) => (c ? { done: undefined } : undefined), deadline, timeout);
    return { claim, pod: name };
  }

  /**
   * A short-lived daemon Pod runs the command and is deleted after it. Binds map onto a
   * workspace's claim (<rootDir>/repo at /workspace, home, tmp), on the workspace Pod's node (a
   * ReadWriteOnce claim can be mounted only there). Runner sockets (`sockets` binds), the
   * operation's proxy socket (network) and small read-only files reach the Pod through the socket
   * tunnel (tunnel.ts) over an exec stream: the Pod keeps a deny-all NetworkPolicy. Any other host
   * path has no equivalent in a cluster and is refused by name.
   */
  async runEphemeral(spec: EphemeralSpec): Promise<ExecResult> {
    await this.clientsReady;
    const id = spec.id ?? `eph-${createHash('sha256').update(String(Math.random()) + Date.now()).digest('hex').slice(0, 16)}`;
    validateId(id);
    let claim: string | undefined;
    let claimOwner: string | undefined;
    let claimPod: string | undefined;
    let claimPolicy: string | undefined;
    const sockets: Array<{ source: string; target: string }> = [];
    const files: Array<{ source: string; target: string }> = [];
    const copies: CopyIn[] = [];
    type Collected = EphemeralBind & { collect: { name: string; maxBytes: number } };
    let work: Collected | undefined;
    const subs: Partial<Record<'repo' | 'home' | 'tmp', { readOnly: boolean }>> = {};
    for (const b of spec.binds) {
      if (b.collect && !b.readOnly && !b.sockets) {
        // A build's directory: its contents go in, its result comes back as a tar the runner parses (untar.ts).
        if (work || b.target !== BUILD_DIR) throw new ServiceError('NOT_SUPPORTED', `binds: ${b.target}: a short-lived Pod takes one collected directory, at ${BUILD_DIR} (its scratch claim; Executor.ephemeralLayout.buildDir)`, { field: 'binds', target: b.target, driver: 'kubernetes' });
        work = b as Collected;
        continue;
      }
      if (b.sockets) {
        sockets.push(b);
        continue;
      }
      const src = path.resolve(b.source);
      const ws = await this.claimFor(src);
      const sub = path.basename(src);
      if (ws && b.target === { repo: '/workspace', home: '/home/user', tmp: '/tmp' }[sub]) {
        if (claim && claim !== ws.claim) throw new ServiceError('NOT_SUPPORTED', 'binds: a short-lived Pod mounts one workspace claim', { field: 'binds' });
        // Only what is bound, as bound (a deployment with secrets takes the checkout read-only).
        subs[sub as 'repo' | 'home' | 'tmp'] = { readOnly: b.readOnly === true };
        claim = ws.claim;
        claimOwner = ws.id;
        claimPod = ws.pod;
        claimPolicy = ws.policy;
        continue;
      }
      if (b.readOnly && IMAGE_CARRIES.some((d) => b.target === d || b.target.startsWith(d + '/'))) {
        // The runner's own code (the agent runtime): the workspace image, built from the same
        // checkout, carries it at the same path. Nothing of the host is bound.
        continue;
      }
      if (b.readOnly && b.target.startsWith(POD_RUN_DIR + '/')) {
        files.push(b);
        continue;
      }
      const copy = await asCopyIn(b);
      if (copy) {
        // A read-only directory (a managed-package release): copied in before the command starts, read-only there.
        copies.push(copy);
        continue;
      }
      throw new ServiceError('NOT_SUPPORTED', `binds: ${b.target} binds a host path; a Kubernetes Pod can mount only a workspace's own claim (repo at /workspace, home at /home/user, tmp at /tmp), take runner sockets and small read-only files under ${POD_RUN_DIR}/, and get read-only directories copied in`, { field: 'binds', target: b.target, driver: 'kubernetes' });
    }
    checkTargets(copies, 'binds');
    // The collected directory is the Pod's scratch claim at /workspace: no workspace claim with it.
    if (work && claim) throw new ServiceError('NOT_SUPPORTED', 'binds: a collected directory and a workspace claim in one short-lived Pod', { field: 'binds', driver: 'kubernetes' });
    const privileged = spec.privileged === true;
    if (privileged && (sockets.length || files.length || copies.length || work || spec.network !== 'none' || !claim || subs.tmp)) {
      // runPrivileged's shape only: the workspace's repo and home, no network, nothing of the runner.
      throw new ServiceError('NOT_SUPPORTED', 'privileged: a privileged Pod takes a workspace claim\'s repo and home only, with no network and no runner sockets, files or copies', { field: 'privileged', driver: 'kubernetes' });
    }
    const proxy = spec.network === 'none' ? undefined : { socket: spec.network.proxySocket, port: TUNNEL_PROXY_PORT };
    const plan = sockets.length || files.length || proxy ? await planTunnel({ sockets, files, proxy }) : undefined;
    const name = objectName(id);
    const scratch = claim === undefined;
    if (scratch) claim = name;
    const started = Date.now();
    let tunnel: TunnelEnd | undefined;
    // The proxy is the runner's (through the tunnel): the Pod itself reaches nothing.
    const env = proxy ? { ...TUNNEL_PROXY_ENV, ...spec.env } : spec.env;
    try {
      let placement: { nodeName?: string; nearWorkspace?: string } = {};
      if (!scratch) {
        // A clone may run while the workspace's own create() is still making the claim.
        if (claimOwner) await createOrKeep(this.k.core.createNamespacedPersistentVolumeClaim({ namespace: this.ns, body: claimManifest(claim!, claimOwner, this.o) }));
        const nodeName = (await orNull(this.k.core.readNamespacedPod({ name: claimPod ?? claim!, namespace: this.ns })))?.spec?.nodeName;
        // Near the workspace's Pod: its policy label is the workspace's object name, which a Sandbox's claim carries after the template's prefix.
        placement = nodeName ? { nodeName } : { nearWorkspace: claimPolicy ?? (claim!.startsWith(sandboxClaimName('')) ? claim!.slice(sandboxClaimName('').length) : claim) };
      }
      if (scratch) await createOrKeep(this.k.core.createNamespacedPersistentVolumeClaim({ namespace: this.ns, body: { ...claimManifest(name, id, this.o), spec: { ...claimManifest(name, id, this.o).spec, resources: { requests: { storage: '1Gi' } } } } }));
      await this.applyPolicy(name, id, proxy ? 'none' : spec.network);
      // The command's environment (a deployment's secrets) goes over the exec stream only, never
      // into the Pod object the cluster stores: the Pod carries the proxy variables alone.
      const body = daemonPodManifest({ name, id, role: EPHEMERAL_ROLE, claim: claim!, limits: spec.limits, env: proxy ? TUNNEL_PROXY_ENV : undefined, o: this.o, ...placement, copies: releaseVolumeParts(copies, this.o), ...(scratch ? {} : { subs }), privileged });
      const createPod = (dryRun: boolean) =>
        this.k.core.createNamespacedPod({ namespace: this.ns, body, ...(dryRun ? { dryRun: 'All' } : {}) }).catch((err: unknown) => {
          const e = asServiceError(err, dryRun ? 'create pod (dry run)' : 'create pod');
          throw (privileged && podSecurityRefusal(e, this.ns)) || e;
        });
      // Refused rather than run as the node's root. A dry run first: an API server without user
      // namespaces answers without hostUsers and no Pod ever exists. Then the stored Pod itself
      // (another API server of a skewed control plane may have served the create): deleted
      // (finally) before anything runs in it.
      const would = privileged ? hostUsersProblem(await createPod(true)) : null;
      if (would) throw new ServiceError('FAILED_PRECONDITION', `hostUsers: ${would} (dry run; no Pod was made); ${USER_NAMESPACES_NEEDED}`, { field: 'hostUsers', pod: name, driver: 'kubernetes' });
      const created = await createPod(false);
      const stored = privileged ? hostUsersProblem(created) : null;
      if (stored) throw new ServiceError('FAILED_PRECONDITION', `hostUsers: ${stored} (the Pod was deleted before anything ran in it); ${USER_NAMESPACES_NEEDED}`, { field: 'hostUsers', pod: name, driver: 'kubernetes' });
      await this.fill(name, copies);
      const h = await this.attach(id, name, created);
      if (privileged) await this.checkUserNamespace(h, name);
      if (work) await copyInto(this.k.exec, this.ns, name, 'main', { source: work.source, target: work.target }, work.target, MAX_COPY_BYTES);
      if (plan) tunnel = await openTunnel(this.k.exec, this.ns, name, plan);
      // The daemon takes a working directory inside /workspace only; another (the toolbox's /tmp)
      // is entered by a shell in front of the command.
      let cwd = spec.cwd && spec.cwd !== '/' ? path.posix.normalize(spec.cwd) : undefined;
      let argv = spec.argv;
      let command = spec.command;
      if (cwd && cwd !== '/workspace' && !cwd.startsWith('/workspace/')) {
        argv = ['/bin/sh', '-c', 'cd -- "$0" && exec "$@"', cwd, ...(spec.argv ?? ['/bin/bash', '-c', spec.command!])];
        command = undefined;
        cwd = undefined;
      }
      // The daemon's exec takes at most a day: a short-lived Pod lives at most that long (an agent runtime's backstop is longer).
      const timeoutMs = spec.timeoutMs === undefined ? undefined : Math.min(spec.timeoutMs, MAX_EXEC_MS);
      let r = await this.exec(h, { argv, command, cwd, env, stdin: spec.stdin, timeoutMs, maxOutputBytes: spec.maxOutputBytes }, spec.onOutput, spec.signal);
      if (privileged) r = await this.handBack(h, r);
      if (work && r.exitCode === 0 && !r.timedOut && !r.cancelled) {
        // The build's processes may still run in the Pod: what comes back is parsed, never trusted.
        tunnel?.close();
        await collectFrom(this.k.exec, this.ns, name, work.target, work.collect.name, work.source, work.collect.maxBytes, 'binds');
      }
      return { ...r, durationMs: Date.now() - started };
    } finally {
      tunnel?.close();
      for (const d of plan?.dirs ?? []) await d.close().catch(() => undefined);
      await this.detach(id);
      await this.deletePod(name).catch(() => undefined);
      await deleteIfPresent(this.k.net.deleteNamespacedNetworkPolicy({ name, namespace: this.ns })).catch(() => undefined);
      if (scratch) await deleteIfPresent(this.k.core.deleteNamespacedPersistentVolumeClaim({ name, namespace: this.ns })).catch(() => undefined);
    }
  }

  /**
   * Before a privileged command runs: its Pod's /proc/self/uid_map (read through its daemon, as
   * the command would run) must be a user namespace's that never reaches the node's uid 0.
   */
  private async checkUserNamespace(h: SandboxHandle, pod: string): Promise<void> {
    const r = await this.exec(h, { argv: ['cat', '/proc/self/uid_map'], timeoutMs: 30_000, maxOutputBytes: 64 * 1024 });
    const problem = r.exitCode !== 0 ? `uid_map could not be read (exit ${r.exitCode}: ${r.stderr.slice(0, 200)})` : hostRootProblem(r.stdout);
    if (problem) throw new ServiceError('FAILED_PRECONDITION', `hostUsers: pod ${pod} is not in a user namespace of its own: ${problem}; ${USER_NAMESPACES_NEEDED}`, { field: 'hostUsers', pod, driver: 'kubernetes' });
  }

  /**
   * After a privileged command, in its Pod, as its root: what uid 0 owns under the claim's mounts
   * goes back to the workspace user (privileged.ts HAND_BACK). The command's result is kept
   * whatever happens; a hand-back that fails says so at the end of its stderr.
   */
  private async handBack(h: SandboxHandle, r: ExecResult): Promise<ExecResult> {
    const hb = await this.exec(h, { argv: HAND_BACK, timeoutMs: 300_000, maxOutputBytes: 16 * 1024 }).catch((err: unknown) => ({ exitCode: null, stderr: err instanceof Error ? err.message : String(err) }));
    if (hb.exitCode === 0) return r;
    return { ...r, stderr: `${r.stderr}${r.stderr && !r.stderr.endsWith('\n') ? '\n' : ''}atelier: handing files owned by uid 0 back to the workspace user (1000) did not finish: ${hb.stderr.trim().slice(0, 500)}\n` };
  }

  /** Closes every relay (the runner is stopping; Pods keep running for recover()). */
  async close(): Promise<void> {
    for (const id of [...this.relays.keys()]) await this.detach(id);
  }
}

/** What the driver reads of a Pod in a watch event or list (plain JSON or the client's V1Pod). */
type PodLike = KubeObjectLike & { status?: { phase?: string; message?: string; reason?: string; containerStatuses?: Array<{ state?: { waiting?: { reason?: string; message?: string } } }>; initContainerStatuses?: Array<{ name: string; state?: { running?: unknown } }> } };

/** "phase Pending: ImagePullBackOff (…)": a Pod's phase and why it waits, for errors. */
function podPhaseNote(p: PodLike): string {
  const waiting = p.status?.containerStatuses?.find((c) => c.state?.waiting)?.state?.waiting;
  const why = waiting?.reason ? `: ${waiting.reason}${waiting.message ? ` (${waiting.message.slice(0, 200)})` : ''}` : p.status?.reason ? `: ${p.status.reason}` : '';
  return `phase ${p.status?.phase ?? 'unknown'}${why}`;
}

function validateId(id: string): void {
  if (!/^[A-Za-z0-9_-]{1,100}$/.test(id)) throw new ServiceError('INVALID_ARGUMENT', 'sandbox id must be 1-100 characters of [A-Za-z0-9_-]', { field: 'id' });
}

/** A Kubernetes quantity ("12345n", "1.5", "250m", "64Mi", "1Gi") as a number of base units. */
export function quantity(q: string | undefined): number {
  if (!q) return 0;
  const m = /^([0-9.]+)([a-zA-Z]*)$/.exec(q);
  if (!m) return 0;
  const n = Number(m[1]);
  const suffix: Record<string, number> = { '': 1, n: 1e-9, u: 1e-6, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4 };
  return n * (suffix[m[2]!] ?? 0);
}

/** A claimed Sandbox that is not what this workspace's would be (createClaimed: the caller falls back). */
class ClaimMismatch extends Error {}

/** A claim's Ready condition, for errors. */
function claimCondition(c: ClaimObject | undefined): string {
  if (!c) return 'no claim seen';
  const r = c.status?.conditions?.find((x) => x.type === 'Ready');
  return r ? `Ready ${r.status}${r.reason ? `, ${r.reason}` : ''}${r.message ? `: ${r.message}` : ''}` : 'no Ready condition yet';
}
