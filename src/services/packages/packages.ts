/**
 * Managed packages (spec "Managed packages"; docs/packages.md). Owns tables: package_plans,
 * package_resolutions, package_applies, package_releases, package_bindings,
 * package_binding_history, workspace_package_mounts.
 *
 * - A plan is resolved without running package code (npm: Arborist and pacote; uv: pip's resolver on
 *   wheels only), is immutable and identified by its planDigest (SHA-256 of its canonical form): the
 *   same resolution gives the same plan, anything that changes gives a new one.
 * - Every plan needs the owner's approval (a `package_plan` request in the one approvals queue,
 *   bound to the digest), or says `approval: unavailable` when this instance cannot build it.
 * - An apply builds the plan in a builder sandbox (no workspace, no secrets, egress only to the
 *   configured registry through a one-host egress proxy), which installs exactly the pinned
 *   artifacts (npm ci checks each sha512; pip --require-hashes each sha256), scripts off unless
 *   approved. The runner then checks the tree against the plan, launch-checks each binary with no
 *   network, and stores the tree as an immutable content-addressed release.
 * - Bindings (owner scope: every new workspace and the toolbox; workspace scope: overrides in one
 *   workspace) point at releases, with a generation and a rollback history. A workspace mounts what
 *   was bound when its sandbox was first made and keeps it until it is recreated.
 */
import { chmod, chown, lchown, lstat, mkdir, readdir, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { existsSync, lstatSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import type { DB } from '../../store/db.js';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import type { AuditLog, Actor } from '../instance/index.js';
import type { Executor, EphemeralBind, ExecResult, SandboxLimits, WorkspaceStorage } from '../../sandbox/executor.js';
import type { ApprovalService } from '../approvals.js';
import { startEgressProxy, type EgressDecision } from '../../sandbox/egress.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';
import { sha256Hex } from '../../core/crypto.js';
import { canonicalJson } from '../../core/canonical-json.js';
import { quoted } from '../../core/display.js';
import { resolveNpm, type PlannedPackage } from './npm.js';
import { PIP_PYTHON, normalise, pipAvailable, resolvePip, runtimePython, type PlannedWheel } from './pip.js';
import { riskSignals } from './risk.js';
import { copyTreeNoFollow, TreeRefusal, type TreeEntry } from './tree.js';
import { IMAGES_UNAVAILABLE, ImageProblem, imageMatches, imagesAvailable, makeReleaseImage, mountPointsBelow, mountReleaseImage, unmountRelease, type ReleaseImage } from './image.js';
import { isMountPoint, removeTreeNoFollow } from '../../sandbox/host-fs.js';

export type Ecosystem = 'npm' | 'uv';
export type Scope = 'owner' | 'workspace';
export type ApplyState = 'QUEUED' | 'BUILDING' | 'VERIFYING' | 'LAUNCH_CHECK' | 'SUCCEEDED' | 'FAILED';
const ACTIVE_APPLY: ApplyState[] = ['QUEUED', 'BUILDING', 'VERIFYING', 'LAUNCH_CHECK'];

/** Where releases appear inside a sandbox, and the one PATH directory of their binaries. */
export const PACKAGES_ROOT = '/opt/packages';
const OUTPUT_TAIL_BYTES = 4096;
const BUILD_TIMEOUT_MS = 10 * 60_000;
const LAUNCH_TIMEOUT_MS = 15_000;
/** Most bytes of a built tree brought back as a stream (a driver without host binds: EphemeralBind.collect). */
const MAX_TREE_BYTES = 2 * 1024 ** 3;

/** What the service needs of the workspace service (given lazily: it is built after this one). */
export interface WorkspaceView {
  exists(id: string): boolean;
  /** Ids of workspaces that are not closed. */
  retained(): string[];
  sandboxLimits: SandboxLimits;
  /** workspace_open's toolkits and allowToolkitWorkspaceChanges. */
  toolkits(id: string): { toolkits: string[]; allowChanges: boolean };
}

interface Deps {
  db: DB;
  config: Config;
  log: Logger;
  audit: AuditLog;
  approvals: ApprovalService;
  executor: Executor;
  workspaces: () => WorkspaceView;
  /** Install root (for data/popular-packages.json). */
  installRoot: string;
  /** Why sandboxes cannot run here, if they cannot (then no plan can be built). */
  sandboxDisabledReason?: string;
}

interface PlanRow {
  id: string;
  digest: string;
  ecosystem: Ecosystem;
  name: string;
  version: string;
  scope: Scope;
  workspace_id: string | null;
  plan_json: string;
  build_json: string;
  approval: 'required' | 'unavailable';
  approval_id: string | null;
  created_at: string;
}
interface ApplyRow {
  id: string;
  plan_id: string;
  state: ApplyState;
  step: string | null;
  error_code: string | null;
  error_message: string | null;
  output_tail: string | null;
  release_id: string | null;
  binding_id: string | null;
  created_at: string;
  ended_at: string | null;
}
interface ReleaseRow {
  id: string;
  digest: string;
  ecosystem: Ecosystem;
  name: string;
  version: string;
  manifest_json: string;
  executor_image: string;
  created_at: string;
}
interface BindingRow {
  id: string;
  scope: Scope;
  workspace_id: string;
  ecosystem: Ecosystem;
  name: string;
  release_id: string;
  generation: number;
  created_at: string;
  updated_at: string;
}

/** What the builder installs, kept beside the plan (covered by its digest). */
type BuildSpec =
  | { ecosystem: 'npm'; registry: string; manifest: Record<string, unknown>; lockfile: Record<string, unknown>; lifecycleScripts: boolean; packages: Array<{ location: string; name: string; version: string }> }
  | { ecosystem: 'uv'; index: string; python: string; wheels: PlannedWheel[] };

export interface PlanInput {
  ecosystem: 'npm' | 'uv' | 'apt';
  name: string;
  version?: string;
  scope: Scope;
  workspaceId?: string;
  python?: string;
  lifecycleScripts?: boolean;
}

type ReleaseFile = TreeEntry;

export class PackageService {
  private readonly root: string;
  private readonly running = new Map<string, Promise<void>>();
  private readonly resolving = new Map<string, Promise<void>>();
  private readonly waiters = new Set<() => void>();
  private executorImageCache: string | undefined;
  /** Release images mounted by this runner (digest -> the mount, settled once mounted; a failed one is forgotten). */
  private readonly mounted = new Map<string, Promise<void>>();
  /** Release directories from before images being converted (digest -> the conversion). */
  private readonly converting = new Map<string, Promise<ReleaseImage>>();
  /** Why a release could not be mounted, as this runner last found (digest -> the reason, for packages_list and packages_status). */
  private readonly damaged = new Map<string, string>();

  constructor(private readonly deps: Deps) {
    // Traversable (not listable) by sandbox uids: builders bind their build directory, sandboxes
    // the mounts of release images (mounts/<digest>). The images themselves (releases/) are root's alone.
    this.root = join(deps.config.dataDir, 'packages');
  }

  private async dirs(): Promise<void> {
    await mkdir(this.root, { recursive: true, mode: 0o711 });
    await chmod(this.root, 0o711);
    for (const d of ['build', 'mounts']) await mkdir(join(this.root, d), { recursive: true, mode: 0o711 });
    for (const d of ['releases', 'cache']) {
      await mkdir(join(this.root, d), { recursive: true, mode: 0o700 });
      await chmod(join(this.root, d), 0o700);
    }
  }

  /** The release's image (root's, 0400) and where this runner mounts it for sandboxes to bind. */
  private imagePath(digest: string): string {
    return join(this.root, 'releases', `${digest}.sqfs`);
  }
  private mountPoint(digest: string): string {
    return join(this.root, 'mounts', digest);
  }
  /** Where a runner before release images kept the release: a directory (converted on first need, or at start). */
  private legacyPath(digest: string): string {
    return join(this.root, 'releases', digest);
  }

  // ---------- guards ----------

  /** Every tool of the section refuses clearly while the operator has not enabled it. */
  requireEnabled(): void {
    if (!this.deps.config.packagesEnabled)
      throw new ServiceError(
        'FAILED_PRECONDITION',
        'managed packages are off on this instance: the operator enables them with --packages-enabled (ATELIER_PACKAGES_ENABLED=true, PACKAGES_ENABLED in the spec)',
        { setting: 'packagesEnabled' },
      );
  }

  private caPem(): string | undefined {
    const packagesCaFile = this.deps.config.packagesCaFile;
    if (!packagesCaFile) return undefined;
    try {
      return readFileSync(packagesCaFile, 'utf8');
    } catch (e) {
      throw new ServiceError('FAILED_PRECONDITION', `packagesCaFile: ${packagesCaFile} cannot be read (${(e as NodeJS.ErrnoException).code}); fix --packages-ca-file`, { setting: 'packagesCaFile' });
    }
  }

  /** Identifies what releases are built for: the runtimes a sandbox sees. A change flags older releases stale. */
  async executorImage(): Promise<string> {
    if (this.executorImageCache) return this.executorImageCache;
    const debian = existsSync('/etc/debian_version') ? readFileSync('/etc/debian_version', 'utf8').trim() : 'unknown';
    this.executorImageCache = sha256Hex(`node ${process.versions.node}; python ${(await runtimePython()) ?? 'none'}; debian ${debian}`).slice(0, 16);
    return this.executorImageCache;
  }

  // ---------- plans ----------

  async plan(input: PlanInput, principal: string, actor: Actor): Promise<Record<string, unknown>> {
    this.requireEnabled();
    if (input.ecosystem === 'apt')
      throw new ServiceError('NOT_SUPPORTED', 'ecosystem: apt packages are not supported; use npm or uv (Python wheels)', { field: 'ecosystem' });
    if (input.ecosystem === 'uv' && input.lifecycleScripts !== undefined)
      throw new ServiceError('INVALID_ARGUMENT', 'lifecycleScripts: only meaningful for npm (uv plans are wheels, which have no install scripts)', { field: 'lifecycleScripts' });
    if (input.ecosystem === 'npm' && input.python !== undefined)
      throw new ServiceError('INVALID_ARGUMENT', 'python: only meaningful for ecosystem uv', { field: 'python' });
    if (input.scope === 'owner' && input.workspaceId !== undefined)
      throw new ServiceError('INVALID_ARGUMENT', 'workspaceId: only meaningful with scope workspace (owner scope applies to every new workspace)', { field: 'workspaceId' });
    if (input.scope === 'workspace' && !this.deps.workspaces().exists(input.workspaceId!))
      throw new ServiceError('NOT_FOUND', `workspaceId: no workspace ${input.workspaceId}`, { field: 'workspaceId' });
    if (input.scope === 'workspace') {
      const tk = this.deps.workspaces().toolkits(input.workspaceId!);
      if (tk.toolkits.length && !tk.allowChanges)
        throw new ServiceError(
          'FAILED_PRECONDITION',
          `workspaceId: workspace ${input.workspaceId} was opened with toolkits (${tk.toolkits.join(', ')}) and without allowToolkitWorkspaceChanges, so its packages cannot be changed; open it with allowToolkitWorkspaceChanges true`,
          { field: 'workspaceId', rule: 'allowToolkitWorkspaceChanges' },
        );
    }
    const resolutionId = newId('packageResolution');
    this.deps.db.prepare("INSERT INTO package_resolutions (id, state, created_at) VALUES (?, 'RESOLVING', ?)").run(resolutionId, nowIso());
    let planned: Record<string, unknown> | undefined;
    const work = this.buildPlan(input as PlanInput & { ecosystem: Ecosystem }, principal, actor).then(
      (p) => {
        planned = p;
        this.deps.db.prepare("UPDATE package_resolutions SET state = 'READY', plan_id = ?, ended_at = ? WHERE id = ?").run(p.planId, nowIso(), resolutionId);
      },
      (err: unknown) => {
        const body = err instanceof ServiceError ? err.toBody() : { code: 'INTERNAL', message: 'resolution failed; the service logged the cause', retryable: true, details: {} };
        if (!(err instanceof ServiceError)) this.deps.log.error({ err: err }, 'package resolution failed');
        this.deps.db.prepare("UPDATE package_resolutions SET state = 'FAILED', error_json = ?, ended_at = ? WHERE id = ?").run(JSON.stringify(body), nowIso(), resolutionId);
        throw err;
      },
    ).finally(() => {
      this.resolving.delete(resolutionId);
      this.notify();
    });
    this.resolving.set(resolutionId, work.catch(() => undefined));
    const wait = this.deps.config.packagesResolveWaitMs;
    const timer = new Promise<'late'>((r) => setTimeout(() => r('late'), wait).unref());
    const first = await Promise.race([work.then(() => 'done' as const), timer]);
    if (first === 'done' && planned) return planned;
    return { resolutionId, state: 'RESOLVING', note: `resolution takes longer than ${Math.round(wait / 1000)} s; poll packages_status with resolutionId` };
  }

  private async buildPlan(input: PlanInput & { ecosystem: Ecosystem }, principal: string, actor: Actor): Promise<Record<string, unknown>> {
    await this.dirs();
    const cacheDir = join(this.root, 'cache');
    const image = await this.executorImage();
    let core: Record<string, unknown>;
    let build: BuildSpec;
    let approvalUnavailable: string | null = this.deps.sandboxDisabledReason ? `builds need sandboxes, and this instance runs without them (${this.deps.sandboxDisabledReason})` : null;
    if (!approvalUnavailable && !(await imagesAvailable())) approvalUnavailable = IMAGES_UNAVAILABLE;
    if (input.ecosystem === 'npm') {
      const npmResolution = await resolveNpm(input.name, input.version, { registry: this.deps.config.packagesNpmRegistry, ca: this.caPem(), cacheDir });
      const scripts = input.lifecycleScripts === true;
      const withScripts = npmResolution.packages.filter((p) => Object.keys(p.scripts).length > 0);
      const root = npmResolution.packages.find((p) => p.location === `node_modules/${npmResolution.name}`)!;
      core = {
        ecosystem: 'npm',
        name: npmResolution.name,
        version: npmResolution.version,
        source: this.deps.config.packagesNpmRegistry,
        integrity: root.integrity,
        resolved: root.resolved,
        dependencyCount: npmResolution.packages.length - 1,
        unpackedSize: npmResolution.packages.every((p) => p.unpackedSize !== null) ? npmResolution.packages.reduce((n, p) => n + (p.unpackedSize ?? 0), 0) : null,
        packages: npmResolution.packages.map(publicPackage),
        binaries: npmResolution.packages.flatMap((p) => Object.keys(p.bin).map((b) => ({ name: b, package: `${p.name}@${p.version}`, topLevel: p.location === `node_modules/${npmResolution.name}` }))),
        lifecycleScripts: {
          allowed: scripts,
          present: withScripts.map((p) => ({ package: `${p.name}@${p.version}`, scripts: p.scripts })),
          willRun: scripts ? withScripts.map((p) => ({ package: `${p.name}@${p.version}`, scripts: p.scripts })) : [],
        },
        warnings: riskSignals(this.deps.installRoot, 'npm', input.name, npmResolution.packages),
      };
      build = { ecosystem: 'npm', registry: this.deps.config.packagesNpmRegistry, manifest: npmResolution.manifest, lockfile: npmResolution.lockfile, lifecycleScripts: scripts, packages: npmResolution.packages.map((p) => ({ location: p.location, name: p.name, version: p.version })) };
    } else {
      const runtime = await runtimePython();
      if (!runtime || !(await pipAvailable())) approvalUnavailable ??= 'uv plans need Debian python3 with pip on the runner (apt-get install python3-pip)';
      const python = input.python ?? runtime ?? '3';
      if (runtime && input.python && input.python.split('.').slice(0, 2).join('.') !== runtime)
        throw new ServiceError('FAILED_PRECONDITION', `python: workspaces on this instance run Python ${runtime}; a plan for ${input.python} could not be used there`, { field: 'python', available: runtime });
      if (!runtime) throw new ServiceError('FAILED_PRECONDITION', 'ecosystem: uv plans need Debian python3 on the runner and in workspaces; it is missing here', { field: 'ecosystem' });
      const caFile = this.deps.config.packagesCaFile || undefined;
      if (caFile) this.caPem();
      const pipResolution = await this.withIndexProxy(this.deps.config.packagesPythonIndex, (proxy) => resolvePip(input.name, input.version, { index: this.deps.config.packagesPythonIndex, caFile, python: runtime, proxy }));
      const root = pipResolution.wheels.find((w) => normalise(w.name) === normalise(pipResolution.name))!;
      core = {
        ecosystem: 'uv',
        name: pipResolution.name,
        version: pipResolution.version,
        python: python.split('.').slice(0, 2).join('.'),
        source: this.deps.config.packagesPythonIndex,
        integrity: `sha256-${Buffer.from(root.sha256, 'hex').toString('base64')}`,
        resolved: root.url,
        dependencyCount: pipResolution.wheels.length - 1,
        unpackedSize: null,
        packages: pipResolution.wheels.map((w) => ({ name: w.name, version: w.version, source: w.url, sha256: w.sha256 })),
        binaries: null,
        lifecycleScripts: { allowed: false, present: [], willRun: [] },
        warnings: riskSignals(this.deps.installRoot, 'uv', input.name, pipResolution.wheels.map((w) => ({ name: w.name, version: w.version }))),
      };
      build = { ecosystem: 'uv', index: this.deps.config.packagesPythonIndex, python: runtime, wheels: pipResolution.wheels };
    }
    const scope = { scope: input.scope, workspaceId: input.scope === 'workspace' ? input.workspaceId! : null };
    const conflicts = this.conflictsOf(input.ecosystem, core.name as string, scope.scope, scope.workspaceId);
    const affected = this.affectedWorkspaces(input.ecosystem, core.name as string, scope.scope, scope.workspaceId);
    let body: Record<string, unknown> = { ...core, ...scope, conflicts, affectedWorkspaces: affected, executorImage: image, build: sha256Hex(canonicalJson(build)) };
    let digest = sha256Hex(canonicalJson(body));
    // The same resolution is the same plan, unless that plan is spent (its approval denied or
    // expired, or its apply failed): then asking again is a new plan that says which it supersedes.
    for (let i = 0; ; i++) {
      const existing = this.deps.db.prepare('SELECT * FROM package_plans WHERE digest = ?').get(digest) as PlanRow | undefined;
      if (!existing) break;
      if (!this.spent(existing) || i >= 1000) return this.describePlan(existing);
      body = { ...body, supersedes: existing.id };
      digest = sha256Hex(canonicalJson(body));
    }
    const id = newId('packagePlan');
    let approvalId: string | null = null;
    if (!approvalUnavailable) {
      const refusal = this.deps.approvals.requestApproval(
        {
          kind: 'package_plan',
          workspaceId: scope.workspaceId,
          text: planText(body, digest),
          digest,
          details: { planId: id, ecosystem: input.ecosystem, name: core.name, version: core.version, scope: scope.scope, warnings: (core.warnings as unknown[]).length },
        },
        principal,
        actor,
        'a package plan',
      );
      approvalId = refusal.details.approvalRequestId as string;
    }
    this.deps.db
      .prepare(
        'INSERT INTO package_plans (id, digest, ecosystem, name, version, scope, workspace_id, plan_json, build_json, approval, approval_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
      )
      .run(id, digest, input.ecosystem, core.name, core.version, scope.scope, scope.workspaceId, JSON.stringify({ ...body, approvalUnavailable }), JSON.stringify(build), approvalUnavailable ? 'unavailable' : 'required', approvalId, nowIso());
    this.deps.audit.record({ actor, principal, action: 'packages_plan', target: id, outcome: 'ok', details: { digest, name: core.name, version: core.version } });
    return this.describePlan(this.planRow(id));
  }

  /**
   * pip resolves on the runner, outside any sandbox, and would fetch whatever a wheel's metadata
   * names (a `name @ https://...` dependency): it runs with a proxy that reaches the index host
   * (and, for PyPI, its file host) and nothing else. A loopback TCP port bridges to the egress proxy.
   */
  private async withIndexProxy<T>(index: string, fn: (proxy: string) => Promise<T>): Promise<T> {
    const rules = registryRules(index);
    const sock = join(this.root, 'cache', `resolve-${newId('packageResolution').slice(4)}.sock`);
    const egress = await startEgressProxy({
      socketPath: sock,
      workspaceId: 'package-resolution',
      rules,
      onDecision: (d: EgressDecision) => (d.allowed ? undefined : this.deps.log.warn({ egress: d }, 'package resolution egress refused')),
      socketMode: 0o600,
    });
    const conns = new Set<Socket>();
    const bridge = createNetServer((socket) => {
      const up = connect(sock);
      conns.add(socket).add(up);
      const end = () => (socket.destroy(), up.destroy(), conns.delete(socket), conns.delete(up));
      socket.on('error', end).on('close', end);
      up.on('error', end).on('close', end);
      socket.pipe(up).pipe(socket);
    });
    try {
      await new Promise<void>((res, rej) => bridge.once('error', rej).listen(0, '127.0.0.1', () => res()));
      return await fn(`http://127.0.0.1:${(bridge.address() as AddressInfo).port}`);
    } finally {
      for (const x of conns) x.destroy();
      await new Promise<void>((res) => bridge.close(() => res()));
      await egress.close();
    }
  }

  /** A plan that can never be applied any more: approval denied or expired, or its apply failed. */
  private spent(plan: PlanRow): boolean {
    const apply = this.deps.db.prepare('SELECT state FROM package_applies WHERE plan_id = ?').pluck().get(plan.id) as ApplyState | undefined;
    if (apply) return apply === 'FAILED';
    if (plan.approval !== 'required' || !plan.approval_id) return false;
    const st = this.deps.approvals.get(plan.approval_id).state;
    return st === 'denied' || st === 'expired';
  }

  private planRow(id: string): PlanRow {
    const r = this.deps.db.prepare('SELECT * FROM package_plans WHERE id = ?').get(id) as PlanRow | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `planId: no package plan ${id}`, { field: 'planId' });
    return r;
  }

  private describePlan(plan: PlanRow): Record<string, unknown> {
    const body = JSON.parse(plan.plan_json) as Record<string, unknown>;
    const { approvalUnavailable, build: _b, ...rest } = body;
    let approvalState: string | null = null;
    if (plan.approval_id) approvalState = this.deps.approvals.get(plan.approval_id).state;
    return {
      planId: plan.id,
      ...rest,
      planDigest: plan.digest,
      approval: plan.approval,
      ...(plan.approval === 'unavailable' ? { approvalUnavailableReason: approvalUnavailable } : { approvalRequestId: plan.approval_id, approvalState }),
      createdAt: plan.created_at,
    };
  }

  private conflictsOf(ecosystem: Ecosystem, name: string, scope: Scope, ws: string | null): Array<Record<string, unknown>> {
    const rows = this.deps.db
      .prepare('SELECT b.*, r.version AS rv FROM package_bindings b JOIN package_releases r ON r.id = b.release_id WHERE b.ecosystem = ? AND b.name = ? AND b.scope = ? AND b.workspace_id = ?')
      .all(ecosystem, name, scope, ws ?? '') as Array<BindingRow & { rv: string }>;
    return rows.map((b) => ({ bindingId: b.id, scope: b.scope, workspaceId: b.workspace_id || null, boundVersion: b.rv, generation: b.generation, effect: 'replaces the bound release (rollback keeps the old one)' }));
  }

  /** Workspaces a binding would reach: none now (bindings reach new workspaces), but those that would need recreation to see it. */
  private affectedWorkspaces(ecosystem: Ecosystem, name: string, scope: Scope, ws: string | null): string[] {
    if (scope === 'workspace') return [ws!];
    const overridden = new Set(this.deps.db.prepare("SELECT workspace_id FROM package_bindings WHERE scope = 'workspace' AND ecosystem = ? AND name = ?").pluck().all(ecosystem, name) as string[]);
    return this.deps.workspaces().retained().filter((id) => !overridden.has(id));
  }

  // ---------- applies ----------

  async apply(planId: string, planDigest: string, principal: string, actor: Actor): Promise<Record<string, unknown>> {
    this.requireEnabled();
    const plan = this.planRow(planId);
    if (plan.digest !== planDigest)
      throw new ServiceError('INVALID_ARGUMENT', `planDigest: does not match plan ${planId} (its digest is ${plan.digest}); a changed plan is a new plan: call packages_plan again`, { field: 'planDigest' });
    const replay = this.deps.db.prepare('SELECT * FROM package_applies WHERE plan_id = ?').get(planId) as ApplyRow | undefined;
    if (replay) return { ...this.describeApply(replay), replayed: true };
    if (plan.approval === 'unavailable')
      throw new ServiceError('FAILED_PRECONDITION', `planId: this instance cannot approve or build plan ${planId}: ${(JSON.parse(plan.plan_json) as { approvalUnavailable: string }).approvalUnavailable}`, { field: 'planId' });
    const approval = this.deps.approvals.get(plan.approval_id!);
    if (approval.state === 'pending')
      throw new ServiceError('PERMISSION_DENIED', `planId: plan ${planId} awaits the owner's approval (request ${approval.id} on the dashboard's approvals page); apply it once approved`, { field: 'planId', approvalRequestId: approval.id });
    if (approval.state !== 'approved')
      throw new ServiceError('PERMISSION_DENIED', `planId: the owner's approval of plan ${planId} is ${approval.state}; make a new plan to ask again`, { field: 'planId', approvalRequestId: approval.id, approvalState: approval.state });
    this.deps.approvals.markUsed(approval.id, 'package_plan', plan.digest, actor, principal);
    const id = newId('packageApply');
    this.deps.db.prepare("INSERT INTO package_applies (id, plan_id, state, step, created_at) VALUES (?, ?, 'QUEUED', 'queued', ?)").run(id, planId, nowIso());
    this.deps.audit.record({ actor, principal, action: 'packages_apply', target: id, outcome: 'ok', details: { planId, digest: plan.digest } });
    const pending = this.runApply(id, plan).finally(() => {
      this.running.delete(id);
      this.notify();
    });
    this.running.set(id, pending);
    return this.describeApply(this.applyRow(id));
  }

  private applyRow(id: string): ApplyRow {
    const r = this.deps.db.prepare('SELECT * FROM package_applies WHERE id = ?').get(id) as ApplyRow | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `applyId: no package apply ${id}`, { field: 'applyId' });
    return r;
  }

  private describeApply(applyRow: ApplyRow): Record<string, unknown> {
    return {
      applyId: applyRow.id,
      planId: applyRow.plan_id,
      state: applyRow.state,
      step: applyRow.step,
      errorCode: applyRow.error_code,
      error: applyRow.error_message,
      outputTail: applyRow.output_tail,
      releaseId: applyRow.release_id,
      bindingId: applyRow.binding_id,
      createdAt: applyRow.created_at,
      endedAt: applyRow.ended_at,
    };
  }

  private setApply(id: string, state: ApplyState, step: string, extra: Partial<Pick<ApplyRow, 'error_code' | 'error_message' | 'output_tail' | 'release_id' | 'binding_id'>> = {}): void {
    const ended = state === 'SUCCEEDED' || state === 'FAILED' ? nowIso() : null;
    this.deps.db
      .prepare('UPDATE package_applies SET state = ?, step = ?, error_code = COALESCE(?, error_code), error_message = COALESCE(?, error_message), output_tail = COALESCE(?, output_tail), release_id = COALESCE(?, release_id), binding_id = COALESCE(?, binding_id), ended_at = COALESCE(?, ended_at) WHERE id = ?')
      .run(state, step, extra.error_code ?? null, extra.error_message ?? null, extra.output_tail ?? null, extra.release_id ?? null, extra.binding_id ?? null, ended, id);
    this.notify();
  }

  private async runApply(id: string, plan: PlanRow): Promise<void> {
    const buildDir = join(this.root, 'build', id);
    try {
      const build = JSON.parse(plan.build_json) as BuildSpec;
      await this.dirs();
      await removeBuildDir(buildDir, this.deps.executor.storage);
      await mkdir(buildDir, { recursive: true, mode: 0o711 });
      // The build's own filesystem (as a workspace's, sandboxDiskMb): the builder's /build shows
      // no host path in its mountinfo, and a build that fills it fails alone (docs/packages.md).
      const disk = join(buildDir, 'fs');
      await mkdir(disk, { mode: 0o711 });
      const storage = this.deps.executor.storage;
      if (this.deps.config.sandboxDiskMb > 0 && storage?.mountScratch) await storage.mountScratch(join(buildDir, 'fs.img'), this.deps.config.sandboxDiskMb, disk);
      const work = join(disk, 'work');
      await mkdir(work, { mode: 0o700 });
      this.setApply(id, 'BUILDING', build.ecosystem === 'npm' ? 'fetching and installing the pinned packages (npm ci)' : 'fetching and installing the pinned wheels (pip --require-hashes)');
      const result = await this.builder(id, buildDir, work, build).catch((e: unknown) => {
        // A driver that brings the tree back as a stream refused it (EphemeralBind.collect): as a tree root refuses.
        if (e instanceof ServiceError && (e.details as { reason?: string } | undefined)?.reason === 'tree_refused') throw new ApplyFailure('TREE_MISMATCH', e.message, null);
        throw e;
      });
      if (result.exitCode !== 0 || result.timedOut || result.cancelled) {
        const text = result.stderr + '\n' + result.stdout;
        const code = /EINTEGRITY|integrity checksum failed|THESE PACKAGES DO NOT MATCH THE HASHES/i.test(text) ? 'INTEGRITY_MISMATCH' : result.timedOut ? 'BUILD_TIMED_OUT' : 'BUILD_FAILED';
        const message =
          code === 'INTEGRITY_MISMATCH'
            ? 'an artifact the registry served does not match the integrity the plan pinned; nothing was installed'
            : result.timedOut
              ? `the build passed ${BUILD_TIMEOUT_MS / 60000} minutes and was stopped; nothing was installed`
              : `the builder exited with ${result.exitCode ?? result.signal}; nothing was installed`;
        throw new ApplyFailure(code, message, tail(text));
      }
      this.setApply(id, 'VERIFYING', 'checking the installed tree against the plan');
      // The builder's processes are gone (its cgroup is removed or runEphemeral failed), but its
      // tree is still its: root takes a copy by descriptor into a directory only root can write,
      // and everything after (checks, launch checks, the release) uses that copy (tree.ts).
      const stage = join(buildDir, 'stage');
      await mkdir(stage, { mode: 0o711 });
      const tree = join(stage, 'tree');
      let files: ReleaseFile[];
      try {
        files = await copyTreeNoFollow(work, build.ecosystem === 'npm' ? 'node_modules' : 'site', tree);
      } catch (e) {
        if (e instanceof TreeRefusal) throw new ApplyFailure('TREE_MISMATCH', e.message, null);
        throw e;
      }
      await this.verifyTree(build, tree);
      const bins = build.ecosystem === 'npm' ? await npmBinaries(tree) : await pythonBinaries(tree);
      // The release is an image of root's copy (packages/image.ts): what the launch checks run
      // and every sandbox mounts is that image, a filesystem of its own (no host path in mountinfo).
      this.setApply(id, 'VERIFYING', 'making the release image');
      const img = join(buildDir, 'release.sqfs');
      let image: ReleaseImage;
      try {
        image = await makeReleaseImage(tree, img);
      } catch (e) {
        if (e instanceof ImageProblem) throw new ApplyFailure('BUILD_FAILED', e.message, null);
        throw e;
      }
      this.setApply(id, 'LAUNCH_CHECK', `starting each binary once with no network (${bins.length})`);
      if (bins.length) {
        const mounted = join(buildDir, 'rel');
        await mountReleaseImage(img, image, mounted);
        try {
          for (const b of bins) await this.launchCheck(build.ecosystem, plan.name, mounted, b);
        } finally {
          await unmountRelease(mounted);
        }
      }
      const digest = sha256Hex(canonicalJson({ ecosystem: build.ecosystem, name: plan.name, files }));
      const release = await this.storeRelease(plan, build, img, image, digest, files, bins);
      const binding = this.bind(plan, release.id);
      this.setApply(id, 'SUCCEEDED', 'release built, verified and bound', { release_id: release.id, binding_id: binding.id });
      this.deps.audit.record({ actor: 'system', action: 'packages_release', target: release.id, outcome: 'ok', details: { applyId: id, digest, bindingId: binding.id } });
    } catch (e) {
      const f = e instanceof ApplyFailure ? e : e instanceof ServiceError ? new ApplyFailure(e.code, e.message, null) : new ApplyFailure('INTERNAL', 'the apply failed unexpectedly; the service logged the cause', null);
      if (!(e instanceof ApplyFailure) && !(e instanceof ServiceError)) this.deps.log.error({ err: e, applyId: id }, 'package apply failed');
      this.setApply(id, 'FAILED', 'failed; nothing was installed', { error_code: f.code, error_message: f.message, output_tail: f.tail });
      this.deps.audit.record({ actor: 'system', action: 'packages_release', target: id, outcome: 'failed', reason: `${f.code}: ${f.message}` });
    } finally {
      await removeBuildDir(buildDir, this.deps.executor.storage).catch((err: unknown) => this.deps.log.warn({ err, applyId: id }, 'package build directory not removed'));
    }
  }

  /** The builder sandbox: no workspace, no secrets, egress only to the registry host. */
  private async builder(id: string, buildDir: string, work: string, build: BuildSpec): Promise<ExecResult> {
    const uid = this.deps.config.sandboxUid;
    const registry = new URL(build.ecosystem === 'npm' ? build.registry : build.index);
    const sock = join(buildDir, 'p.sock');
    const proxy = await startEgressProxy({
      socketPath: sock,
      workspaceId: `build-${id}`,
      // The operator configured this registry: the one host a builder reaches (a private address only when the registry is one).
      rules: registryRules(registry.toString()),
      onDecision: (d: EgressDecision) => this.deps.log.info({ egress: d, applyId: id }, 'builder egress'),
      socketMode: 0o600,
    });
    try {
      await chown(sock, uid, uid);
      // Where the driver takes the build's directory and the CA bundle (a Kubernetes Pod: its
      // scratch claim and its own /dev/shm; the tree comes back as a tar the runner parses).
      const layout = this.deps.executor.ephemeralLayout;
      const B = layout?.buildDir ?? '/build';
      const caPath = layout?.caFile ?? '/run/atelier-ca.pem';
      const binds: EphemeralBind[] = [{ source: work, target: B, collect: { name: build.ecosystem === 'npm' ? 'node_modules' : 'site', maxBytes: MAX_TREE_BYTES } }];
      const ca = this.caPem();
      if (ca) {
        const bundle = join(buildDir, 'ca.pem');
        await writeFile(bundle, readFileSync('/etc/ssl/certs/ca-certificates.crt', 'utf8') + '\n' + ca, { mode: 0o644 });
        binds.push({ source: bundle, target: caPath, readOnly: true });
      }
      let command: string;
      const env: Record<string, string> = { NO_PROXY: '', no_proxy: '' };
      if (build.ecosystem === 'npm') {
        await writeFile(join(work, 'package.json'), JSON.stringify(build.manifest, null, 2));
        await writeFile(join(work, 'package-lock.json'), JSON.stringify(build.lockfile, null, 2));
        const npmrc = [`registry=${build.registry}`, 'proxy=http://127.0.0.1:3128', 'https-proxy=http://127.0.0.1:3128', 'audit=false', 'fund=false', 'update-notifier=false', 'fetch-retries=1', 'fetch-retry-mintimeout=1000', 'fetch-retry-maxtimeout=3000', ca ? `cafile=${caPath}` : ''];
        await writeFile(join(work, '.npmrc'), npmrc.filter(Boolean).join('\n') + '\n');
        command = `npm ci --no-audit --no-fund --loglevel=warn --cache /tmp/npm-cache ${build.lifecycleScripts ? '' : '--ignore-scripts'}`;
        env.npm_config_userconfig = `${B}/.npmrc`;
      } else {
        const req = build.wheels.map((w) => `${w.name}==${w.version} --hash=sha256:${w.sha256}`).join('\n') + '\n';
        await writeFile(join(work, 'requirements.txt'), req);
        command =
          `${PIP_PYTHON} -m pip install --disable-pip-version-check --no-input --no-cache-dir --no-deps --only-binary=:all: --require-hashes ` +
          `--index-url "$INDEX" --proxy http://127.0.0.1:3128 ${ca ? `--cert ${caPath}` : ''} --target ${B}/site -r ${B}/requirements.txt`;
        env.INDEX = build.index;
        env.PIP_CONFIG_FILE = '/dev/null';
      }
      await chownTree(work, uid);
      return await this.deps.executor.runEphemeral({
        id: `b-${id.slice(4, 16)}`,
        binds,
        limits: this.deps.workspaces().sandboxLimits,
        network: { proxySocket: sock },
        command,
        cwd: B,
        env,
        timeoutMs: BUILD_TIMEOUT_MS,
        maxOutputBytes: 1_048_576,
      });
    } finally {
      await proxy.close();
    }
  }

  /** The installed tree (root's copy: node_modules or site) holds exactly the planned packages at their planned versions. */
  private async verifyTree(build: BuildSpec, tree: string): Promise<void> {
    if (build.ecosystem === 'npm') {
      const want = new Map(build.packages.map((p) => [p.location, p]));
      const found = await npmInventory(tree);
      for (const [loc, p] of want) {
        const got = found.get(loc);
        if (!got) throw new ApplyFailure('TREE_MISMATCH', `${p.name}@${p.version} is missing at ${loc} after the install`, null);
        if (got.name !== p.name || got.version !== p.version) throw new ApplyFailure('TREE_MISMATCH', `${loc} holds ${got.name}@${got.version}, the plan pinned ${p.name}@${p.version}`, null);
      }
      for (const [loc, got] of found) if (!want.has(loc)) throw new ApplyFailure('TREE_MISMATCH', `${got.name}@${got.version} at ${loc} is not in the plan`, null);
    } else {
      const entries = await readdir(tree).catch(() => [] as string[]);
      const dists = new Map<string, string>();
      for (const e of entries) {
        const m = /^(.+)-([^-]+)\.dist-info$/.exec(e);
        if (m) dists.set(normalise(m[1]!), m[2]!);
      }
      for (const w of build.wheels) {
        const v = dists.get(normalise(w.name));
        if (v !== w.version) throw new ApplyFailure('TREE_MISMATCH', `${w.name}==${w.version} is ${v ? `installed as ${v}` : 'missing'} after the install`, null);
      }
      if (dists.size !== build.wheels.length) throw new ApplyFailure('TREE_MISMATCH', `the install holds ${dists.size} distributions, the plan pinned ${build.wheels.length}`, null);
    }
  }

  /** Starts one binary of the release, mounted (its image) at `mounted`, with --version and no network. */
  private async launchCheck(ecosystem: Ecosystem, name: string, mounted: string, bin: { name: string; rel: string }): Promise<void> {
    const target = releaseTarget(ecosystem, name);
    const env: Record<string, string> = ecosystem === 'uv' ? { PYTHONPATH: target } : {};
    const result = await this.deps.executor.runEphemeral({
      binds: [{ source: mounted, target, readOnly: true }],
      limits: this.deps.workspaces().sandboxLimits,
      network: 'none',
      argv: [`${target}/${bin.rel}`, '--version'],
      cwd: '/tmp',
      env,
      timeoutMs: LAUNCH_TIMEOUT_MS,
      maxOutputBytes: 16_384,
    });
    if (result.timedOut) throw new ApplyFailure('LAUNCH_CHECK_FAILED', `binary ${bin.name} did not exit within ${LAUNCH_TIMEOUT_MS / 1000} s of starting (run with --version, no network)`, tail(result.stderr + result.stdout));
    if (result.signal || result.exitCode === 126 || result.exitCode === 127 || result.exitCode === null)
      throw new ApplyFailure('LAUNCH_CHECK_FAILED', `binary ${bin.name} could not start (${result.signal ? `signal ${result.signal}` : `exit ${result.exitCode}`})`, tail(result.stderr + result.stdout));
    // A binary that does not know --version may exit non-zero; one whose own code cannot load is broken.
    if (result.exitCode !== 0 && /MODULE_NOT_FOUND|Cannot find module|ModuleNotFoundError|ImportError/.test(result.stderr))
      throw new ApplyFailure('LAUNCH_CHECK_FAILED', `binary ${bin.name} started but could not load its own modules`, tail(result.stderr));
  }

  /**
   * Stores the image as the release of `digest`. An identical tree is the same release: one whose
   * image is in place stays as it is; one whose image is missing or was found damaged (or is still
   * a directory from before images) gets this image.
   */
  private async storeRelease(plan: PlanRow, build: BuildSpec, img: string, image: ReleaseImage, digest: string, files: ReleaseFile[], bins: Array<{ name: string; rel: string }>): Promise<ReleaseRow> {
    const have = this.deps.db.prepare('SELECT * FROM package_releases WHERE digest = ?').get(digest) as ReleaseRow | undefined;
    const recorded = have ? releaseImage(have) : undefined;
    if (have && recorded && !this.hasLegacyEntry(digest) && (await imageMatches(this.imagePath(digest), recorded))) return have;
    await this.dirs();
    // Immutable: root made the image from its own copy (readable by root only; sandboxes see it
    // mounted read-only); both directories are root's, so nothing redirects the rename.
    await rename(img, this.imagePath(digest));
    await removeTreeNoFollow(this.legacyPath(digest));
    this.damaged.delete(digest);
    if (have) {
      this.setReleaseImage(have, image);
      return have;
    }
    const versions =
      build.ecosystem === 'npm' ? build.packages.map((p) => ({ name: p.name, version: p.version, location: p.location })) : build.wheels.map((w) => ({ name: w.name, version: w.version, sha256: w.sha256 }));
    const size = files.reduce((n, f) => n + (f.size ?? 0), 0);
    const manifest = { versions, binaries: bins.map((b) => b.name), size, files: files.length, filesDigest: digest, planId: plan.id, planDigest: plan.digest, image };
    const id = newId('packageRelease');
    this.deps.db
      .prepare('INSERT INTO package_releases (id, digest, ecosystem, name, version, manifest_json, executor_image, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
      .run(id, digest, plan.ecosystem, plan.name, plan.version, JSON.stringify(manifest), await this.executorImage(), nowIso());
    return this.deps.db.prepare('SELECT * FROM package_releases WHERE id = ?').get(id) as ReleaseRow;
  }

  private bind(plan: PlanRow, releaseId: string): BindingRow {
    const db = this.deps.db;
    const ws = plan.workspace_id ?? '';
    return db.transaction(() => {
      const cur = db.prepare('SELECT * FROM package_bindings WHERE scope = ? AND workspace_id = ? AND ecosystem = ? AND name = ?').get(plan.scope, ws, plan.ecosystem, plan.name) as BindingRow | undefined;
      const now = nowIso();
      let id: string;
      if (cur) {
        id = cur.id;
        db.prepare('UPDATE package_bindings SET release_id = ?, generation = generation + 1, updated_at = ? WHERE id = ?').run(releaseId, now, id);
      } else {
        id = newId('packageBinding');
        db.prepare('INSERT INTO package_bindings (id, scope, workspace_id, ecosystem, name, release_id, generation, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?)').run(id, plan.scope, ws, plan.ecosystem, plan.name, releaseId, now, now);
      }
      db.prepare('INSERT OR REPLACE INTO package_binding_history (binding_id, release_id, bound_at) VALUES (?, ?, ?)').run(id, releaseId, now);
      return db.prepare('SELECT * FROM package_bindings WHERE id = ?').get(id) as BindingRow;
    })();
  }

  // ---------- bindings ----------

  private bindingRow(id: string): BindingRow {
    const r = this.deps.db.prepare('SELECT * FROM package_bindings WHERE id = ?').get(id) as BindingRow | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `bindingId: no package binding ${id}`, { field: 'bindingId' });
    return r;
  }

  private async describeRelease(release: ReleaseRow): Promise<Record<string, unknown>> {
    const manifest = JSON.parse(release.manifest_json) as Record<string, unknown>;
    return {
      releaseId: release.id,
      ecosystem: release.ecosystem,
      name: release.name,
      version: release.version,
      digest: release.digest,
      versions: manifest.versions,
      binaries: manifest.binaries,
      size: manifest.size,
      files: manifest.files,
      stale: release.executor_image !== (await this.executorImage()),
      ...this.presence(release),
      createdAt: release.created_at,
    };
  }

  /** `present`, and when it is not, `problem`: why the release cannot be mounted (missing, replaced, damaged). */
  private presence(release: ReleaseRow): { present: boolean; problem?: string } {
    const problem = this.releaseProblem(release);
    return problem === null ? { present: true } : { present: false, problem };
  }

  /**
   * Why the release cannot be mounted, as far as is known without hashing its image (a mount hashes
   * it; what a mount of this runner found is remembered): null when its image is in place, or its
   * directory from before release images is (converted when first needed, and at start).
   */
  private releaseProblem(release: ReleaseRow): string | null {
    const known = this.damaged.get(release.digest);
    if (known) return known;
    const image = lstatOrNull(this.imagePath(release.digest));
    if (image?.isFile() && releaseImage(release)) return null;
    const legacy = lstatOrNull(this.legacyPath(release.digest));
    if (legacy?.isDirectory()) return null;
    if (legacy) return `its directory (from before release images) was replaced by ${legacy.isSymbolicLink() ? 'a symbolic link' : 'something that is not a directory'} (never followed)`;
    if (!image) return 'its image is missing on disk';
    if (!image.isFile()) return 'its image was replaced by something that is not a regular file (never followed)';
    return 'its image has no recorded digest (the service stopped while storing it)';
  }

  /** Whether anything is at the place a release directory from before images was kept (converted, or refused, when the release is next needed). */
  private hasLegacyEntry(digest: string): boolean {
    return lstatOrNull(this.legacyPath(digest)) !== null;
  }

  private setReleaseImage(release: ReleaseRow, image: ReleaseImage): void {
    const manifest = { ...(JSON.parse(release.manifest_json) as Record<string, unknown>), image };
    this.deps.db.prepare('UPDATE package_releases SET manifest_json = ? WHERE id = ?').run(JSON.stringify(manifest), release.id);
    release.manifest_json = JSON.stringify(manifest);
  }

  async list(scope: Scope | undefined, workspaceId: string | undefined, includeHistory: boolean): Promise<Record<string, unknown>> {
    this.requireEnabled();
    const where: string[] = [];
    const params: unknown[] = [];
    if (scope) (where.push('scope = ?'), params.push(scope));
    if (workspaceId) (where.push("(scope = 'owner' OR workspace_id = ?)"), params.push(workspaceId));
    const rows = this.deps.db.prepare(`SELECT * FROM package_bindings ${where.length ? 'WHERE ' + where.join(' AND ') : ''} ORDER BY scope, workspace_id, ecosystem, name`).all(...params) as BindingRow[];
    const bindings = [];
    for (const binding of rows) {
      const rel = this.deps.db.prepare('SELECT * FROM package_releases WHERE id = ?').get(binding.release_id) as ReleaseRow;
      const entry: Record<string, unknown> = { bindingId: binding.id, scope: binding.scope, workspaceId: binding.workspace_id || null, ecosystem: binding.ecosystem, name: binding.name, generation: binding.generation, release: await this.describeRelease(rel), updatedAt: binding.updated_at };
      if (includeHistory) {
        const hist = this.deps.db.prepare('SELECT r.*, h.bound_at FROM package_binding_history h JOIN package_releases r ON r.id = h.release_id WHERE h.binding_id = ? ORDER BY h.bound_at DESC').all(binding.id) as Array<ReleaseRow & { bound_at: string }>;
        entry.history = await Promise.all(hist.map(async (h) => ({ ...(await this.describeRelease(h)), boundAt: h.bound_at, current: h.id === binding.release_id })));
      }
      bindings.push(entry);
    }
    return { bindings };
  }

  rollback(bindingId: string, releaseId: string, expectedGeneration: number, principal: string, actor: Actor): Record<string, unknown> {
    this.requireEnabled();
    const db = this.deps.db;
    return db.transaction(() => {
      const b = this.bindingRow(bindingId);
      if (b.generation !== expectedGeneration)
        throw new ServiceError('STALE_GENERATION', `expectedGeneration: binding ${bindingId} is at generation ${b.generation}, not ${expectedGeneration}; read it again with packages_list`, { field: 'expectedGeneration', currentGeneration: b.generation });
      const inHistory = db.prepare('SELECT 1 FROM package_binding_history WHERE binding_id = ? AND release_id = ?').get(bindingId, releaseId);
      if (!inHistory) throw new ServiceError('NOT_FOUND', `releaseId: ${releaseId} is not in the history of binding ${bindingId} (packages_list with includeHistory lists it)`, { field: 'releaseId' });
      const rel = db.prepare('SELECT * FROM package_releases WHERE id = ?').get(releaseId) as ReleaseRow;
      const problem = this.releaseProblem(rel);
      if (problem !== null)
        throw new ServiceError('FAILED_PRECONDITION', `releaseId: release ${releaseId} (${rel.name}@${rel.version}) cannot be mounted: ${problem}; plan the package again (a new plan, approved, builds the release again)`, { field: 'releaseId', problem });
      db.prepare('UPDATE package_bindings SET release_id = ?, generation = generation + 1, updated_at = ? WHERE id = ?').run(releaseId, nowIso(), bindingId);
      db.prepare('UPDATE package_binding_history SET bound_at = ? WHERE binding_id = ? AND release_id = ?').run(nowIso(), bindingId, releaseId);
      this.deps.audit.record({ actor, principal, action: 'packages_rollback', target: bindingId, outcome: 'ok', details: { releaseId } });
      const now = this.bindingRow(bindingId);
      return { bindingId, releaseId, generation: now.generation, note: 'new workspaces mount this release; existing ones keep theirs until recreated' };
    })();
  }

  async remove(bindingId: string, expectedGeneration: number, principal: string, actor: Actor): Promise<Record<string, unknown>> {
    this.requireEnabled();
    const db = this.deps.db;
    const removed = db.transaction(() => {
      const binding = this.bindingRow(bindingId);
      const busy = db
        .prepare(`SELECT a.id FROM package_applies a JOIN package_plans p ON p.id = a.plan_id WHERE a.state IN (${ACTIVE_APPLY.map(() => '?').join(',')}) AND p.ecosystem = ? AND p.name = ? AND p.scope = ? AND COALESCE(p.workspace_id, '') = ?`)
        .pluck()
        .get(...ACTIVE_APPLY, binding.ecosystem, binding.name, binding.scope, binding.workspace_id) as string | undefined;
      if (busy) throw new ServiceError('CONFLICT', `bindingId: apply ${busy} for ${binding.name} is running; remove the binding once it has ended`, { field: 'bindingId', applyId: busy });
      if (binding.generation !== expectedGeneration)
        throw new ServiceError('STALE_GENERATION', `expectedGeneration: binding ${bindingId} is at generation ${binding.generation}, not ${expectedGeneration}`, { field: 'expectedGeneration', currentGeneration: binding.generation });
      db.prepare('DELETE FROM package_binding_history WHERE binding_id = ?').run(bindingId);
      db.prepare('DELETE FROM package_bindings WHERE id = ?').run(bindingId);
      return binding;
    })();
    const collected = await this.collect();
    this.deps.audit.record({ actor, principal, action: 'packages_remove', target: bindingId, outcome: 'ok', details: { collected } });
    return { bindingId, removed: true, name: removed.name, collectedReleases: collected, note: 'new workspaces stop seeing it at once; existing ones keep it until recreated' };
  }

  /** Deletes releases no binding, history entry or retained workspace refers to. */
  async collect(): Promise<string[]> {
    const db = this.deps.db;
    const retained = new Set(this.deps.workspaces().retained());
    for (const ws of db.prepare('SELECT DISTINCT workspace_id FROM workspace_package_mounts').pluck().all() as string[]) if (!retained.has(ws)) db.prepare('DELETE FROM workspace_package_mounts WHERE workspace_id = ?').run(ws);
    const garbage = db
      .prepare(
        `SELECT * FROM package_releases r WHERE NOT EXISTS (SELECT 1 FROM package_bindings b WHERE b.release_id = r.id)
           AND NOT EXISTS (SELECT 1 FROM package_binding_history h WHERE h.release_id = r.id)
           AND NOT EXISTS (SELECT 1 FROM workspace_package_mounts m WHERE m.release_id = r.id)`,
      )
      .all() as ReleaseRow[];
    for (const r of garbage) {
      // Unmounted here first (sandboxes that still bind it keep their own mount until they end; the
      // loop device goes with the last one), then the image (and a directory from before images).
      this.mounted.delete(r.digest);
      this.damaged.delete(r.digest);
      await unmountRelease(this.mountPoint(r.digest));
      await rm(this.imagePath(r.digest), { force: true });
      await removeTreeNoFollow(this.legacyPath(r.digest));
      db.prepare('DELETE FROM package_releases WHERE id = ?').run(r.id);
    }
    return garbage.map((r) => r.id);
  }

  // ---------- status ----------

  private notify(): void {
    for (const w of [...this.waiters]) w();
  }

  private async waitChange(ms: number, done: () => boolean): Promise<void> {
    if (ms <= 0 || done()) return;
    await new Promise<void>((resolve) => {
      const finish = () => {
        clearTimeout(timeout);
        this.waiters.delete(check);
        resolve();
      };
      const check = () => {
        if (done()) finish();
      };
      const timeout = setTimeout(finish, ms);
      this.waiters.add(check);
    });
  }

  async status(args: { applyId?: string; resolutionId?: string; waitMs: number }): Promise<Record<string, unknown>> {
    this.requireEnabled();
    if (args.applyId) {
      const first = this.applyRow(args.applyId);
      await this.waitChange(args.waitMs, () => {
        const now = this.applyRow(args.applyId!);
        return now.state !== first.state || now.step !== first.step || now.state === 'SUCCEEDED' || now.state === 'FAILED';
      });
      return this.describeApply(this.applyRow(args.applyId));
    }
    if (args.resolutionId) {
      const row = () => {
        const r = this.deps.db.prepare('SELECT * FROM package_resolutions WHERE id = ?').get(args.resolutionId) as { id: string; state: string; plan_id: string | null; error_json: string | null } | undefined;
        if (!r) throw new ServiceError('NOT_FOUND', `resolutionId: no package resolution ${args.resolutionId}`, { field: 'resolutionId' });
        return r;
      };
      await this.waitChange(args.waitMs, () => row().state !== 'RESOLVING');
      const r = row();
      if (r.state === 'READY') return { resolutionId: r.id, state: 'READY', plan: this.describePlan(this.planRow(r.plan_id!)) };
      if (r.state === 'FAILED') return { resolutionId: r.id, state: 'FAILED', error: JSON.parse(r.error_json!) };
      return { resolutionId: r.id, state: 'RESOLVING' };
    }
    return this.summary();
  }

  private async summary(): Promise<Record<string, unknown>> {
    const db = this.deps.db;
    const inflight = (db.prepare(`SELECT * FROM package_applies WHERE state IN (${ACTIVE_APPLY.map(() => '?').join(',')}) ORDER BY created_at`).all(...ACTIVE_APPLY) as ApplyRow[]).map((r) => this.describeApply(r));
    const awaiting = (db.prepare("SELECT * FROM package_plans WHERE approval = 'required' AND NOT EXISTS (SELECT 1 FROM package_applies a WHERE a.plan_id = package_plans.id) ORDER BY created_at DESC LIMIT 100").all() as PlanRow[])
      .filter((p) => this.deps.approvals.get(p.approval_id!).state === 'pending')
      .map((p) => ({ planId: p.id, name: p.name, version: p.version, ecosystem: p.ecosystem, scope: p.scope, workspaceId: p.workspace_id, planDigest: p.digest, approvalRequestId: p.approval_id }));
    const missing = (db.prepare('SELECT * FROM package_releases r WHERE EXISTS (SELECT 1 FROM package_bindings b WHERE b.release_id = r.id)').all() as ReleaseRow[])
      .map((r) => ({ r, problem: this.releaseProblem(r) }))
      .filter((x) => x.problem !== null)
      .map(({ r, problem }) => ({ releaseId: r.id, ecosystem: r.ecosystem, name: r.name, version: r.version, problem }));
    const needing: Array<Record<string, unknown>> = [];
    for (const ws of this.deps.workspaces().retained()) {
      const mounted = this.recordedMounts(ws);
      if (!mounted) continue;
      const want = this.effectiveBindings(ws);
      const key = (m: Array<{ ecosystem: string; name: string; release_id: string }>) => m.map((x) => `${x.ecosystem}/${x.name}@${x.release_id}`).sort().join(',');
      if (key(mounted) !== key(want)) needing.push({ workspaceId: ws, mounted: mounted.map((m) => `${m.ecosystem}/${m.name}@${m.release_id}`), bound: want.map((m) => `${m.ecosystem}/${m.name}@${m.release_id}`) });
    }
    return { inflightApplies: inflight, plansAwaitingApproval: awaiting, missingReleases: missing, workspacesNeedingRecreation: needing };
  }

  // ---------- mounting into sandboxes ----------

  /**
   * Checks workspace_open's toolkits: each names an owner-bound package (`name`, or `npm:name` /
   * `uv:name` when both ecosystems bind the name); allowToolkitWorkspaceChanges needs toolkits.
   */
  validateToolkits(toolkits: string[], allowChanges: boolean): void {
    const field = toolkits.length ? 'toolkits' : 'allowToolkitWorkspaceChanges';
    if (!this.deps.config.packagesEnabled)
      throw new ServiceError('FAILED_PRECONDITION', `${field}: toolkits are managed packages, which are off on this instance (the operator enables them with --packages-enabled); send [] or omit it`, { field, setting: 'packagesEnabled' });
    if (allowChanges && toolkits.length === 0)
      throw new ServiceError('INVALID_ARGUMENT', 'allowToolkitWorkspaceChanges: only meaningful with toolkits (without toolkits a workspace may always get workspace-scope packages)', { field: 'allowToolkitWorkspaceChanges' });
    const owner = this.deps.db.prepare("SELECT ecosystem, name FROM package_bindings WHERE scope = 'owner'").all() as Array<{ ecosystem: Ecosystem; name: string }>;
    toolkits.forEach((toolkit, i) => {
      const matches = owner.filter((b) => toolkitMatches(toolkit, b));
      if (matches.length === 0)
        throw new ServiceError('INVALID_ARGUMENT', `toolkits[${i}]: ${toolkit} is not an owner-bound package (packages_list with scope owner lists them)`, { field: `toolkits[${i}]` });
      if (matches.length > 1) throw new ServiceError('INVALID_ARGUMENT', `toolkits[${i}]: ${toolkit} is bound in both ecosystems; write npm:${toolkit} or uv:${toolkit}`, { field: `toolkits[${i}]` });
    });
  }

  /** Owner bindings, overridden by the workspace's own (for a workspace id), else owner bindings only; narrowed by the workspace's toolkits. */
  private effectiveBindings(workspaceId: string | null): Array<{ ecosystem: Ecosystem; name: string; release_id: string }> {
    const tk = workspaceId ? this.deps.workspaces().toolkits(workspaceId) : { toolkits: [], allowChanges: true };
    const rows = (
      this.deps.db
        .prepare("SELECT * FROM package_bindings WHERE scope = 'owner' OR (scope = 'workspace' AND workspace_id = ?) ORDER BY scope DESC")
        .all(workspaceId ?? '\u0000') as BindingRow[]
    ).filter((b) => (b.scope === 'owner' ? tk.toolkits.length === 0 || tk.toolkits.some((t) => toolkitMatches(t, b)) : tk.toolkits.length === 0 || tk.allowChanges));
    const out = new Map<string, { ecosystem: Ecosystem; name: string; release_id: string }>();
    // 'workspace' sorts after 'owner' descending first: owner rows come last and never replace a workspace row.
    for (const b of rows) if (!out.has(`${b.ecosystem}/${b.name}`)) out.set(`${b.ecosystem}/${b.name}`, { ecosystem: b.ecosystem, name: b.name, release_id: b.release_id });
    return [...out.values()];
  }

  private recordedMounts(ws: string): Array<{ ecosystem: Ecosystem; name: string; release_id: string }> | null {
    const rows = this.deps.db.prepare('SELECT ecosystem, name, release_id FROM workspace_package_mounts WHERE workspace_id = ?').all(ws) as Array<{ ecosystem: Ecosystem; name: string; release_id: string }>;
    const marker = rows.find((r) => r.ecosystem === ('-' as Ecosystem));
    if (!marker) return null;
    return rows.filter((r) => r !== marker);
  }

  /**
   * The read-only binds and PATH for a sandbox. For a workspace, what was bound when its sandbox
   * was first made (recorded then), so it keeps them until recreated; null = the toolbox (owner
   * bindings now).
   */
  async mountsFor(workspaceId: string | null): Promise<{ mounts: EphemeralBind[]; env: Record<string, string> }> {
    if (!this.deps.config.packagesEnabled) return { mounts: [], env: {} };
    let set = workspaceId ? this.recordedMounts(workspaceId) : null;
    if (!set) {
      set = this.effectiveBindings(workspaceId);
      if (workspaceId) {
        const db = this.deps.db;
        db.transaction(() => {
          db.prepare('INSERT OR REPLACE INTO workspace_package_mounts (workspace_id, ecosystem, name, release_id) VALUES (?, ?, ?, ?)').run(workspaceId, '-', '-', '-');
          for (const m of set!) db.prepare('INSERT OR REPLACE INTO workspace_package_mounts (workspace_id, ecosystem, name, release_id) VALUES (?, ?, ?, ?)').run(workspaceId, m.ecosystem, m.name, m.release_id);
        })();
      }
    }
    const mounts: EphemeralBind[] = [];
    const binDirs: string[] = [];
    const pyPaths: string[] = [];
    for (const record of set) {
      const rel = this.deps.db.prepare('SELECT * FROM package_releases WHERE id = ?').get(record.release_id) as ReleaseRow | undefined;
      if (!rel) continue;
      // The release's image, mounted by this runner (verified when mounted): a filesystem whose root
      // is the release, so the sandbox's mountinfo names no host path. One that cannot be mounted
      // (missing, replaced, damaged) is left out, logged and reported by packages_list and packages_status.
      const source = await this.mountedRelease(rel, workspaceId);
      if (!source) continue;
      const target = releaseTarget(record.ecosystem, record.name);
      mounts.push({ source, target, readOnly: true });
      if (record.ecosystem === 'npm') binDirs.push(`${target}/.bin`);
      else (binDirs.push(`${target}/bin`), pyPaths.push(target));
    }
    const env: Record<string, string> = {};
    if (binDirs.length) env.PATH = `${binDirs.join(':')}:/usr/local/bin:/usr/bin:/bin`;
    if (pyPaths.length) env.PYTHONPATH = pyPaths.join(':');
    return { mounts, env };
  }

  /** The host mount of the release's image (mounted the first time a sandbox needs it), or null when it cannot be mounted. */
  private async mountedRelease(release: ReleaseRow, workspaceId: string | null): Promise<string | null> {
    const mountPoint = this.mountPoint(release.digest);
    for (let attempt = 0; attempt < 2; attempt++) {
      let pending = this.mounted.get(release.digest);
      if (!pending) {
        const mounting = this.mountRelease(release, mountPoint);
        pending = mounting;
        this.mounted.set(release.digest, mounting);
        mounting.catch(() => (this.mounted.get(release.digest) === mounting ? this.mounted.delete(release.digest) : undefined));
      }
      try {
        await pending;
      } catch (e) {
        const problem = e instanceof ImageProblem ? e.message : 'it could not be mounted (the service logged the cause)';
        this.damaged.set(release.digest, problem);
        this.deps.log.warn({ release: release.id, name: release.name, version: release.version, workspace: workspaceId, problem, err: e instanceof ImageProblem ? undefined : e }, 'bound release not mounted');
        return null;
      }
      if (await isMountPoint(mountPoint)) {
        this.damaged.delete(release.digest);
        return mountPoint;
      }
      // Unmounted behind this runner's back: mount it again.
      if (this.mounted.get(release.digest) === pending) this.mounted.delete(release.digest);
    }
    return null;
  }

  /** Mounts the release's image at mountPoint, converting a release directory from before images first. */
  private async mountRelease(release: ReleaseRow, mountPoint: string): Promise<void> {
    await this.dirs();
    const image = this.hasLegacyEntry(release.digest) ? await this.convert(release) : releaseImage(release);
    if (!image)
      throw lstatOrNull(this.imagePath(release.digest))
        ? new ImageProblem('corrupt', 'its image has no recorded digest (the service stopped while storing it)')
        : new ImageProblem('missing', 'its image is missing on disk');
    // What an earlier runner left mounted here is not trusted: mounted again, verified.
    await unmountRelease(mountPoint);
    await mountReleaseImage(this.imagePath(release.digest), image, mountPoint);
  }

  /** Converts a release directory from before images (once at a time per release). */
  private convert(release: ReleaseRow): Promise<ReleaseImage> {
    let pending = this.converting.get(release.digest);
    if (!pending) {
      pending = this.convertLegacy(release).finally(() => this.converting.delete(release.digest));
      this.converting.set(release.digest, pending);
    }
    return pending;
  }

  /**
   * A release directory a runner before release images left (`releases/<digest>/`, root's) becomes
   * its image: copied by descriptor like a build's tree (tree.ts: the top opened O_NOFOLLOW, a link
   * or a special file refuses it, nothing followed), checked against the release's recorded entry
   * count and byte size, imaged, and the directory removed. A directory that is no longer what the
   * release recorded is not converted (the release then needs building again).
   */
  private async convertLegacy(release: ReleaseRow): Promise<ReleaseImage> {
    const legacy = this.legacyPath(release.digest);
    const st = lstatOrNull(legacy);
    const image = releaseImage(release);
    // A conversion that stopped after storing its image: the directory is only left over.
    if (image && lstatOrNull(this.imagePath(release.digest))?.isFile()) {
      await removeTreeNoFollow(legacy);
      return image;
    }
    if (st && !st.isDirectory())
      throw new ImageProblem('replaced', `its directory (from before release images) was replaced by ${st.isSymbolicLink() ? 'a symbolic link' : 'something that is not a directory'} (never followed); not converted`);
    const work = join(this.root, 'build', `convert-${release.digest.slice(0, 16)}`);
    await removeBuildDir(work, this.deps.executor.storage);
    await mkdir(work, { mode: 0o700 });
    try {
      const tree = join(work, 'tree');
      let files: ReleaseFile[];
      try {
        files = await copyTreeNoFollow(join(this.root, 'releases'), release.digest, tree);
      } catch (e) {
        if (e instanceof TreeRefusal) throw new ImageProblem('unconvertible', `its directory (from before release images) cannot be converted: ${e.message.replace(`${release.digest}: `, '').replace(/the install left/g, 'it holds')}`);
        throw e;
      }
      const manifest = JSON.parse(release.manifest_json) as { files?: number; size?: number };
      const size = files.reduce((n, f) => n + (f.size ?? 0), 0);
      if (files.length !== manifest.files || size !== manifest.size)
        throw new ImageProblem('unconvertible', `its directory (from before release images) holds ${files.length} entries of ${size} bytes, the release recorded ${manifest.files} of ${manifest.size}: it changed on disk; not converted`);
      const img = join(work, 'release.sqfs');
      const made = await makeReleaseImage(tree, img);
      this.setReleaseImage(release, made);
      await rename(img, this.imagePath(release.digest));
      await removeTreeNoFollow(legacy);
      this.deps.audit.record({ actor: 'system', action: 'packages_release_converted', target: release.id, outcome: 'ok', details: { digest: release.digest, imageSha256: made.sha256, bytes: made.bytes } });
      this.deps.log.info({ release: release.id, name: release.name, bytes: made.bytes }, 'release directory converted to its image');
      return made;
    } finally {
      await removeBuildDir(work, this.deps.executor.storage).catch((err: unknown) => this.deps.log.warn({ err, release: release.id }, 'release conversion directory not removed'));
    }
  }

  /** A workspace is gone: forget what it mounted (releases only it held become collectable). */
  async forgetWorkspace(id: string): Promise<void> {
    this.deps.db.prepare('DELETE FROM workspace_package_mounts WHERE workspace_id = ?').run(id);
    this.deps.db.prepare("DELETE FROM package_binding_history WHERE binding_id IN (SELECT id FROM package_bindings WHERE scope = 'workspace' AND workspace_id = ?)").run(id);
    this.deps.db.prepare("DELETE FROM package_bindings WHERE scope = 'workspace' AND workspace_id = ?").run(id);
    if (this.deps.config.packagesEnabled) await this.collect();
  }

  /**
   * At start, before any sandbox: release mounts an earlier runner left (one killed -9 does) are
   * unmounted (each is mounted again, verified, when a sandbox needs it); applies that were running
   * cannot be resumed safely: they fail and leave nothing; release directories from before images
   * are converted in the background (or when first needed, whichever comes first).
   */
  async startup(): Promise<void> {
    const mounts = join(this.root, 'mounts');
    for (const mountPoint of await mountPointsBelow(mounts)) await unmountRelease(mountPoint).catch((err: unknown) => this.deps.log.warn({ err, mountPoint }, 'leftover release mount not removed'));
    for (const name of await readdir(mounts).catch(() => [] as string[])) await rmdir(join(mounts, name)).catch(() => undefined);
    this.deps.db
      .prepare(`UPDATE package_applies SET state = 'FAILED', step = 'interrupted', error_code = 'INTERRUPTED', error_message = 'the service restarted during the build; nothing was installed: apply the plan again with a new plan', ended_at = ? WHERE state IN (${ACTIVE_APPLY.map(() => '?').join(',')})`)
      .run(nowIso(), ...ACTIVE_APPLY);
    this.deps.db.prepare("UPDATE package_resolutions SET state = 'FAILED', error_json = ?, ended_at = ? WHERE state = 'RESOLVING'").run(JSON.stringify({ code: 'UNAVAILABLE', message: 'the service restarted during the resolution; plan again', retryable: true, details: {} }), nowIso());
    // What those builds left (their filesystems and launch-check mounts still mounted) goes too.
    const builds = join(this.root, 'build');
    await readdir(builds)
      .then(async (ids) => {
        for (const b of ids) if (!this.running.has(b)) await removeBuildDir(join(builds, b), this.deps.executor.storage);
      })
      .catch((err: unknown) => {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.deps.log.warn({ err }, 'leftover package build directories not removed');
      });
    if (this.deps.config.packagesEnabled) void this.convertAll();
  }

  /** Converts every release directory from before images, one at a time (a failure is logged and reported as the release's problem). */
  private async convertAll(): Promise<void> {
    const releases = this.deps.db.prepare('SELECT * FROM package_releases ORDER BY created_at').all() as ReleaseRow[];
    for (const release of releases) {
      if (!this.hasLegacyEntry(release.digest)) continue;
      await this.convert(release).catch((e: unknown) => {
        const problem = e instanceof ImageProblem ? e.message : 'it could not be converted (the service logged the cause)';
        this.damaged.set(release.digest, problem);
        this.deps.log.warn({ release: release.id, name: release.name, problem, err: e instanceof ImageProblem ? undefined : e }, 'release directory from before images not converted');
      });
    }
  }

  /** At shutdown, once no sandbox runs: this runner's release mounts go (their loop devices with them). */
  async shutdown(): Promise<void> {
    await Promise.all([...this.mounted.values(), ...this.converting.values()].map((p) => p.catch(() => undefined)));
    this.mounted.clear();
    for (const mountPoint of await mountPointsBelow(join(this.root, 'mounts'))) await unmountRelease(mountPoint).catch((err: unknown) => this.deps.log.warn({ err, mountPoint }, 'release mount not removed at shutdown'));
  }

  /** Waits for work in flight (tests and shutdown). */
  async idle(): Promise<void> {
    await Promise.all([...this.running.values(), ...this.resolving.values()].map((p) => p.catch(() => undefined)));
  }
}

class ApplyFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly tail: string | null,
  ) {
    super(message);
  }
}

function publicPackage(pkg: PlannedPackage): Record<string, unknown> {
  return { name: pkg.name, version: pkg.version, location: pkg.location, source: pkg.resolved, integrity: pkg.integrity, unpackedSize: pkg.unpackedSize, binaries: Object.keys(pkg.bin), installScripts: Object.keys(pkg.scripts), deprecated: pkg.deprecated, publishedAt: pkg.publishedAt };
}

/**
 * The plan as the owner reads it on the approval. Every value that comes from a package or its
 * registry (names, versions, integrities, sources, binaries, lifecycle script values, warnings) is
 * quoted with JSON string escaping, so none can end its line and forge another: a script value
 * holding "\nplanDigest: ..." shows as one quoted line with \n in it. (Characters JSON leaves as
 * they are, such as bidirectional controls, are escaped and flagged where the approval is shown.)
 */
function planText(body: Record<string, unknown>, digest: string): string {
  const lines = [
    `${body.ecosystem} package ${quoted(`${body.name}@${body.version}`)} for scope ${body.scope}${body.workspaceId ? ` (workspace ${body.workspaceId})` : ''}`,
    `source: ${quoted(body.source)}`,
    `integrity: ${quoted(body.integrity)}`,
    `dependencies: ${body.dependencyCount}`,
  ];
  for (const p of body.packages as Array<Record<string, unknown>>)
    lines.push(`  ${quoted(`${p.name}@${p.version}`)} ${p.integrity ? `integrity ${quoted(p.integrity)}` : p.sha256 ? `sha256 ${quoted(p.sha256)}` : 'no integrity'}`);
  const bins = (body.binaries as Array<{ name: string; package: string; topLevel: boolean }> | null) ?? [];
  for (const b of bins) lines.push(`binary ${quoted(b.name)} of ${quoted(b.package)}${b.topLevel ? ' (the requested package)' : ''}`);
  const ls = body.lifecycleScripts as { allowed: boolean; willRun: Array<{ package: string; scripts: Record<string, string> }> };
  lines.push(`lifecycle scripts: ${ls.allowed ? 'ALLOWED' : 'off'}`);
  for (const w of ls.willRun) for (const [k, v] of Object.entries(w.scripts)) lines.push(`  ${quoted(w.package)} ${quoted(k)}: ${quoted(v)}`);
  for (const w of body.warnings as Array<{ kind: string; package: string; message: string }>) lines.push(`warning ${w.kind} ${quoted(w.package)}: ${quoted(w.message)}`);
  lines.push(`planDigest: ${digest}`);
  return lines.join('\n');
}

function tail(text: string): string {
  const b = Buffer.from(text, 'utf8');
  return b.length <= OUTPUT_TAIL_BYTES ? text : '…' + b.subarray(b.length - OUTPUT_TAIL_BYTES).toString('utf8');
}

/** A toolkit name: `name` or `ecosystem:name`. */
function toolkitMatches(item: string, other: { ecosystem: Ecosystem; name: string }): boolean {
  const m = /^(npm|uv):(.+)$/.exec(item);
  return m ? m[1] === other.ecosystem && m[2] === other.name : item === other.name;
}

const safeDir = (name: string): string => name.replace(/^@/, '').replace(/[^A-Za-z0-9._-]/g, '+');

/**
 * Where a release appears in a sandbox. An npm release is a node_modules tree, so it is mounted as
 * one (/opt/packages/npm/<name>/node_modules): Node resolves a package's dependencies beside it.
 */
export const releaseTarget = (ecosystem: Ecosystem, name: string): string =>
  ecosystem === 'npm' ? `${PACKAGES_ROOT}/npm/${safeDir(name)}/node_modules` : `${PACKAGES_ROOT}/uv/${safeDir(name)}`;

/** The hosts a registry's clients reach: its own host and port, and for PyPI its file host (where the index links wheels). */
function registryRules(url: string): Array<{ host: string; ports: number[]; allowPrivate: boolean }> {
  const u = new URL(url);
  const host = u.hostname.replace(/^\[|\]$/g, '');
  const rules = [{ host, ports: [Number(u.port || 443)], allowPrivate: isPrivateHost(u.hostname) }];
  if (host === 'pypi.org') rules.push({ host: 'files.pythonhosted.org', ports: [443], allowPrivate: false });
  return rules;
}

function isPrivateHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '');
  return host === 'localhost' || /^127\./.test(host) || host === '::1' || /^10\./.test(host) || /^192\.168\./.test(host) || /^172\.(1[6-9]|2\d|3[01])\./.test(host);
}

/** chown -h every entry (no symlink is followed). Only used on trees no sandbox process is alive in. */
async function chownTree(dir: string, uid: number): Promise<void> {
  await lchown(dir, uid, uid);
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) await chownTree(p, uid);
    else await lchown(p, uid, uid);
  }
}

/**
 * A build directory gone: its filesystem and the launch checks' mount of the release image
 * unmounted first (a runner that died mid-build leaves them mounted), then removed by a descriptor
 * walk that never follows a link.
 */
async function removeBuildDir(buildDir: string, storage: WorkspaceStorage | undefined): Promise<void> {
  await unmountRelease(join(buildDir, 'rel'));
  await storage?.unmountScratch?.(join(buildDir, 'fs'));
  await removeTreeNoFollow(buildDir);
}

function lstatOrNull(path: string): ReturnType<typeof lstatSync> | null {
  try {
    return lstatSync(path);
  } catch {
    return null;
  }
}

/** The image a release recorded (manifest_json.image; none for a release from before images). */
function releaseImage(release: ReleaseRow): ReleaseImage | undefined {
  return (JSON.parse(release.manifest_json) as { image?: ReleaseImage }).image;
}

/** node_modules locations -> name and version from each package.json (symlinks not followed). */
async function npmInventory(nm: string, prefix = 'node_modules'): Promise<Map<string, { name: string; version: string }>> {
  const out = new Map<string, { name: string; version: string }>();
  let entries: string[] = [];
  try {
    entries = await readdir(nm);
  } catch {
    return out;
  }
  for (const e of entries) {
    if (e === '.bin' || e === '.package-lock.json' || e.startsWith('.')) continue;
    const names = e.startsWith('@') ? (await readdir(join(nm, e))).map((s) => `${e}/${s}`) : [e];
    for (const name of names) {
      const dir = join(nm, name);
      const st = await lstat(dir);
      if (!st.isDirectory()) throw new ApplyFailure('TREE_MISMATCH', `${prefix}/${name} is not a directory`, null);
      const pj = join(dir, 'package.json');
      const pst = await lstat(pj).catch(() => null);
      if (!pst?.isFile()) throw new ApplyFailure('TREE_MISMATCH', `${prefix}/${name} has no package.json`, null);
      const m = JSON.parse(await readFile(pj, 'utf8')) as { name: string; version: string };
      out.set(`${prefix}/${name}`, { name: m.name, version: m.version });
      for (const [k, v] of await npmInventory(join(dir, 'node_modules'), `${prefix}/${name}/node_modules`)) out.set(k, v);
    }
  }
  return out;
}

/** Binaries npm linked for the top level (node_modules/.bin), as paths relative to the tree. */
async function npmBinaries(nm: string): Promise<Array<{ name: string; rel: string }>> {
  const bin = join(nm, '.bin');
  const names = await readdir(bin).catch(() => [] as string[]);
  return names.filter((n) => !n.startsWith('.')).sort().map((n) => ({ name: n, rel: `.bin/${n}` }));
}

/** Console scripts pip wrote (site/bin). Their shebang names the builder's python, /usr/bin/python3. */
async function pythonBinaries(site: string): Promise<Array<{ name: string; rel: string }>> {
  const names = await readdir(join(site, 'bin')).catch(() => [] as string[]);
  return names.sort().map((n) => ({ name: n, rel: `bin/${n}` }));
}
