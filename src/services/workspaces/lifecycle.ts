/**
 * Workspaces: lifecycle, leases and recovery on the executor. Owns table: workspaces.
 *
 * States (docs/workspaces.md): opening -> active <-> expired_recoverable -> closed; failed opens
 * are removed at once. An idle lease lapses into expired_recoverable (processes stopped, files
 * kept); hardExpiresAt removes everything, whatever the state; workspace_close removes at once.
 *
 * Every git network operation (the clone, recover export) runs in a short-lived sandbox that can
 * reach only the repository host (an egress proxy allowing that host:port alone) and gets its
 * credential from the broker over a socket only that sandbox has. Runner-run git neutralises
 * hooks, fsmonitor and other config that executes programs.
 */
import { join } from 'node:path';
import { chmod, mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import type { DB } from '../../store/db.js';
import type { Statement } from 'better-sqlite3';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import type { AuditLog } from '../instance/index.js';
import type { PrincipalState } from '../access/index.js';
import type { WorkspaceLocks } from '../../core/locks.js';
import type { CursorCodec } from '../../core/cursor.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso, settlesWithin } from '../../core/clock.js';
import type { EphemeralBind, Executor, ExecRequest, ExecResult, SandboxHandle, SandboxLimits, SandboxNetwork, SandboxSpec } from '../../sandbox/executor.js';
import { describeDeath, sandboxKind } from '../../sandbox/executor.js';
import type { ClientProfile, OverviewSection } from '../../sandbox/daemon/protocol.js';
import type { EgressDecision } from '../../sandbox/egress.js';
import { loadEgressRules, WorkspaceEgress } from '../../sandbox/egress/workspace.js';
import type { RepositoryPolicy, ParsedRepoUrl } from '../repos/index.js';
import { parseRepoUrl } from '../repos/index.js';
import type { EnvironmentService } from '../environments.js';
import type { RepoCredentialStore } from '../repos/index.js';
import { gitConfigEnv, NEUTRALISE_REPO_DRIVERS } from '../git/index.js';
import { gitFailure, runEphemeralGit, type EphemeralGitOptions } from '../git/index.js';
import type { HookRunner } from '../extensions/index.js';
import { openFromTemplate, type TemplateHost, type TemplateOpen } from './templates/open.js';
import { detach as detachTemplateDisk } from './templates/store.js';
import type { TemplateService } from './templates/builds.js';

/** What a fork copies of its source workspace (WorkspaceService.forkTemplate); kept with a checkpoint. */
export interface ForkTemplate {
  workspaceId: string;
  repositoryUrl: string;
  ref: string | null;
  branch: string | null;
  headOid: string | null;
  networkProfile: NetworkProfile;
  environmentId: string | null;
  envInjected: boolean;
  options: Record<string, unknown>;
}

export type WorkspaceState = 'opening' | 'active' | 'expired_recoverable' | 'closed';
export type NetworkProfile = 'network-none' | 'dependency-access';

export interface WorkspaceRow {
  id: string;
  repositoryUrl: string;
  ref: string | null;
  branch: string | null;
  headOid: string | null;
  cloneOid: string | null;
  networkProfile: NetworkProfile;
  environmentId: string | null;
  envInjected: boolean;
  state: WorkspaceState;
  stateReason: string | null;
  createdAt: string;
  lastActivityAt: string;
  leaseExpiresAt: string;
  hardExpiresAt: string;
  closedAt: string | null;
  gitIdentity: { name: string; email: string } | null;
}

export interface OpenArgs {
  repositoryUrl: string;
  ref?: string;
  fetchDepth?: number;
  shallowSince?: string;
  networkProfile?: NetworkProfile;
  environmentId?: string;
  confirmEnvironmentInjection?: true;
  toolkits: string[];
  skillSets: unknown[];
  skillOverrides: Record<string, unknown>;
  allowToolkitWorkspaceChanges?: true;
}

interface Deps {
  db: DB;
  config: Config;
  log: Logger;
  audit: AuditLog;
  principals: PrincipalState;
  cursors: CursorCodec;
  executor: Executor;
  repos: RepositoryPolicy;
  repoCredentials: RepoCredentialStore;
  environments: EnvironmentService;
  /** Set in unsafe development mode: no sandboxes can be made, so no workspace opens. */
  sandboxDisabledReason?: string;
  /** Managed packages: the read-only release mounts and PATH of a workspace's sandbox. */
  packages?: {
    mountsFor(workspaceId: string): Promise<{ mounts: EphemeralBind[]; env: Record<string, string> }>;
    /** Checks workspace_open's toolkits (names of owner-bound packages) before anything is made. */
    validateToolkits(toolkits: string[], allowChanges: boolean): void;
  };
  /** Repository extensions (issue #19): records skillSets/skillOverrides and fires on_workspace_open hooks. */
  hooks?: HookRunner;
  /** The per-workspace lock shared with the git tools (core/locks.ts). */
  locks: WorkspaceLocks;
  /** Setup that runs once (docs/templates.md): opens with an environment that has a setup script start from a template. */
  templates?: TemplateService;
  /** Other services clean up their records of a workspace when it is removed (run in order, failures logged). */
  onClose?: Array<(id: string) => Promise<void>>;
}

const GIT_BIN = '/usr/bin/git';
const SHA_RE = /^[0-9a-f]{7,64}$/;

function rowOf(row: Record<string, unknown>): WorkspaceRow {
  const opts = JSON.parse((row.options_json as string) || '{}') as Record<string, unknown>;
  return {
    id: row.id as string,
    repositoryUrl: row.repository_url as string,
    ref: (row.ref as string | null) ?? null,
    branch: (row.branch as string | null) ?? null,
    headOid: (row.head_oid as string | null) ?? null,
    cloneOid: (opts.cloneOid as string | undefined) ?? null,
    networkProfile: row.network_profile as NetworkProfile,
    environmentId: (row.environment_id as string | null) ?? null,
    envInjected: row.env_injected === 1,
    state: row.state as WorkspaceState,
    stateReason: (row.state_reason as string | null) ?? null,
    createdAt: row.created_at as string,
    lastActivityAt: row.last_activity_at as string,
    leaseExpiresAt: row.lease_expires_at as string,
    hardExpiresAt: row.hard_expires_at as string,
    closedAt: (row.closed_at as string | null) ?? null,
    gitIdentity: (opts.gitIdentity as WorkspaceRow['gitIdentity']) ?? null,
  };
}

/** After an open, how long the next open's spare sandbox waits before it starts (the new workspace's first commands go first). */
const SPARE_SANDBOX_DELAY_MS = 500;

/** How long shutdown waits for running lifecycle and git steps before stopping sandboxes under them. */
const SHUTDOWN_LOCK_WAIT_MS = 20_000;

export class WorkspaceService {
  private readonly handles = new Map<string, SandboxHandle>();
  /** The egress proxies of dependency-access workspaces and of network git operations (sandbox layer). */
  private readonly egress: WorkspaceEgress;
  private reaper: NodeJS.Timeout | undefined;
  private readonly lastTouch = new Map<string, number>();
  private readonly restarting = new Map<string, Promise<SandboxHandle>>();
  /** ensureDisk in progress per workspace: concurrent callers (an open's clone and its sandbox start) share one. */
  private readonly disking = new Map<string, Promise<void>>();
  /** The spare disk image being formatted for the next open (sandbox/disk.ts). */
  private spareDisk: Promise<void> | undefined;
  /**
   * The spare workspace sandbox: the sandbox of the next plain open (network-none, no environment,
   * no managed packages), started ahead of time under the workspace id that open will use, on its
   * own mounted filesystem, so an open does not wait for a daemon to start (see prepareSpareSandbox).
   * ready resolves undefined when starting it failed (the open then starts one as usual).
   */
  private spareSandbox: { id: string; disk: Promise<void>; ready: Promise<SandboxHandle | undefined> } | undefined;
  private spareTimer: NodeJS.Timeout | undefined;
  private stopping = false;
  /** Sandboxes found dead and restarted, for workspace_status. */
  private readonly deaths = new Map<string, { at: string; restarts: number; cause?: string }>();

  constructor(private readonly deps: Deps) {
    this.egress = new WorkspaceEgress({
      runDir: join(deps.config.dataDir, 'run'),
      uid: deps.config.sandboxUid,
      gid: deps.config.sandboxUid,
      rules: () => loadEgressRules(deps.config.configPath),
      onDecision: this.logDecision,
    });
  }

  // ---------- helpers ----------

  /** The operator's per-workspace limits; every sandbox of a workspace (long-lived or short-lived) gets them. */
  get sandboxLimits(): SandboxLimits {
    const c = this.deps.config;
    return { memoryBytes: c.sandboxMemoryMb * 1024 * 1024, pidsMax: c.sandboxPidsMax, cpuQuotaPercent: c.sandboxCpuPercent, cpus: c.sandboxCpus || undefined };
  }

  rootDir(id: string): string {
    return join(this.deps.config.dataDir, 'workspaces', id);
  }

  private get ids() {
    return { uid: this.deps.config.sandboxUid, gid: this.deps.config.sandboxUid };
  }

  /** Makes sure the workspace's own filesystem is mounted and its directories exist. */
  private ensureDisk(id: string): Promise<void> {
    const running = this.disking.get(id);
    if (running) return running;
    const pending = (async () => {
      // The driver's storage (executor.ts WorkspaceStorage); none: the driver keeps the files.
      await this.deps.executor.storage?.prepare(id, this.rootDir(id));
    })().finally(() => this.disking.delete(id));
    this.disking.set(id, pending);
    return pending;
  }

  /** Formats the next workspace's disk image in the background, so an open only mounts one. */
  private prepareSpareDisk(): void {
    const storage = this.deps.executor.storage;
    if (this.spareDisk || this.stopping || !storage || this.deps.config.sandboxDiskMb <= 0) return;
    this.spareDisk = storage
      .prepareSpare()
      .then(() => undefined)
      .catch((e) => this.deps.log.warn({ err: e }, 'preparing a spare workspace disk failed'))
      .finally(() => (this.spareDisk = undefined));
  }

  /** Where the id of the spare workspace sandbox is kept while it exists (a restarted runner removes what it left). */
  private get spareFile(): string {
    return join(this.deps.config.dataDir, 'run', 'spare-workspace.json');
  }

  /**
   * Starts the sandbox of the next plain open ahead of time (after each open, and at start-up
   * once the service has opened a workspace before): a new workspace id, its filesystem
   * mounted (from the spare disk image) and its daemon running, with the spec specFor gives such
   * a workspace (no network, no environment, no package mounts). Nothing of any repository or
   * owner secret is in it; the open that takes it clones into it as into a sandbox started then.
   * Not made when managed packages are on (their mounts are chosen per workspace at its open).
   */
  private prepareSpareSandbox(): void {
    if (this.spareSandbox || this.stopping || this.deps.sandboxDisabledReason || this.deps.config.packagesEnabled) return;
    const id = newId('workspace');
    const disk = (async () => {
      await this.spareDisk;
      await writeFile(this.spareFile, JSON.stringify({ id }), { mode: 0o600 });
      await this.ensureDisk(id);
      this.prepareSpareDisk();
    })();
    const ready = (async (): Promise<SandboxHandle | undefined> => {
      try {
        await disk;
        if (this.stopping) return undefined;
        return await this.deps.executor.create({ id, rootDir: this.rootDir(id), limits: this.sandboxLimits, network: 'none', env: {}, mounts: [] });
      } catch (e) {
        this.deps.log.warn({ err: e }, 'starting a spare workspace sandbox failed');
        return undefined;
      }
    })();
    disk.catch(() => undefined); // reported through ready
    this.spareSandbox = { id, disk, ready };
  }

  /** prepareSpareSandbox a moment after an open (SPARE_SANDBOX_DELAY_MS). */
  private scheduleSpareSandbox(): void {
    if (this.spareTimer || this.spareSandbox) return;
    this.spareTimer = setTimeout(() => {
      this.spareTimer = undefined;
      this.prepareSpareSandbox();
    }, SPARE_SANDBOX_DELAY_MS);
    this.spareTimer.unref();
  }

  /** The spare sandbox for an open that can use one (see prepareSpareSandbox); it is the caller's from now on. */
  private takeSpareSandbox(profile: NetworkProfile, envId: string | null): { id: string; disk: Promise<void>; ready: Promise<SandboxHandle | undefined> } | undefined {
    if (profile !== 'network-none' || envId !== null || this.deps.config.packagesEnabled) return undefined;
    const s = this.spareSandbox;
    this.spareSandbox = undefined;
    return s;
  }

  /** Stops and removes a spare sandbox nobody took (shutdown, or one left by an earlier runner). */
  private async discardSpare(id: string, started: SandboxHandle | undefined): Promise<void> {
    const handle = started ?? this.handleById(id);
    await this.deps.executor.destroy(handle).catch((e) => this.deps.log.warn({ err: e }, 'stopping the spare workspace sandbox failed'));
    await this.removeFiles(id).catch((e) => this.deps.log.warn({ err: e }, 'removing the spare workspace files failed'));
    await rm(this.spareFile, { force: true });
  }

  /** A handle for stopping a sandbox an earlier runner left, by id (its cgroups are found by id; the pid is only used without cgroups). */
  private handleById(id: string): SandboxHandle {
    return { id, socketPath: '', pid: -1 };
  }

  /** Deletes every file of a workspace (its filesystem, or its directory tree). */
  private async removeFiles(id: string): Promise<void> {
    await this.deps.executor.storage?.remove(id, this.rootDir(id));
  }

  /** Serialises lifecycle changes per workspace (open, renew, recover, close, reaping), and against the mutating git tools. */
  private locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
    return this.deps.locks.workspace(id, 'lifecycle', fn);
  }

  /** The managed-package toolkits a workspace was opened with (workspace_open's toolkits, allowToolkitWorkspaceChanges). */
  toolkitsOf(id: string): { toolkits: string[]; allowChanges: boolean } {
    const r = this.deps.db.prepare('SELECT options_json FROM workspaces WHERE id = ?').get(id) as { options_json: string } | undefined;
    const o = JSON.parse(r?.options_json || '{}') as { toolkits?: string[]; allowToolkitWorkspaceChanges?: boolean };
    return { toolkits: o.toolkits ?? [], allowChanges: o.allowToolkitWorkspaceChanges === true };
  }

  /** Ids of every workspace that is not closed (its files are retained). */
  retainedIds(): string[] {
    return this.deps.db.prepare("SELECT id FROM workspaces WHERE state != 'closed'").pluck().all() as string[];
  }

  get(id: string): WorkspaceRow {
    const r = this.deps.db.prepare('SELECT * FROM workspaces WHERE id = ?').get(id) as Record<string, unknown> | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `workspaceId: no workspace ${id}`, { field: 'workspaceId' });
    return rowOf(r);
  }

  private update(id: string, fields: Record<string, unknown>): void {
    const keys = Object.keys(fields);
    this.deps.db.prepare(`UPDATE workspaces SET ${keys.map((k) => `${k} = ?`).join(', ')} WHERE id = ?`).run(...keys.map((k) => fields[k]), id);
  }

  private setOption(id: string, key: string, value: unknown): void {
    const r = this.deps.db.prepare('SELECT options_json FROM workspaces WHERE id = ?').get(id) as { options_json: string };
    const opts = JSON.parse(r.options_json || '{}');
    opts[key] = value;
    this.update(id, { options_json: JSON.stringify(opts) });
  }

  private leaseEnd(fromMs: number, seconds: number, hardIso: string): string {
    return new Date(Math.min(fromMs + seconds * 1000, Date.parse(hardIso))).toISOString();
  }

  private logDecision = (d: EgressDecision) => {
    this.deps.log.info({ egress: d }, d.allowed ? 'egress allowed' : 'egress refused');
  };

  /** The sandbox network of a profile: dependency-access (re)starts the workspace's egress proxy (src/sandbox/egress/workspace.ts). */
  private async startWorkspaceProxy(id: string, profile: NetworkProfile): Promise<SandboxNetwork> {
    if (profile === 'network-none') return 'none';
    return { proxySocket: await this.egress.start(id) };
  }

  private async specFor(workspace: WorkspaceRow, network: SandboxNetwork): Promise<SandboxSpec> {
    const env: Record<string, string> = {};
    // Managed-package releases bound when this workspace's sandbox was first made (kept until it is recreated).
    const pkgs = (await this.deps.packages?.mountsFor(workspace.id)) ?? { mounts: [], env: {} };
    Object.assign(env, pkgs.env);
    if (workspace.envInjected && workspace.environmentId) Object.assign(env, this.deps.environments.injection(workspace.environmentId));
    return { id: workspace.id, rootDir: this.rootDir(workspace.id), limits: this.sandboxLimits, network, env, mounts: pkgs.mounts };
  }

  private async startSandbox(workspace: WorkspaceRow): Promise<SandboxHandle> {
    await this.ensureDisk(workspace.id);
    const network = await this.startWorkspaceProxy(workspace.id, workspace.networkProfile);
    const spec = await this.specFor(workspace, network);
    const recovered = await this.deps.executor.recover(spec);
    const h = recovered ?? (await this.deps.executor.create(spec));
    this.handles.set(workspace.id, h);
    this.update(workspace.id, { sandbox_json: JSON.stringify(h) });
    return h;
  }

  /** The workspace's sandbox is the spare started for it; one that failed to start or died is replaced by a fresh start. */
  private async adoptSpare(id: string, ready: Promise<SandboxHandle | undefined>): Promise<SandboxHandle> {
    const h = await ready;
    if (h && (await this.deps.executor.alive(h))) {
      this.handles.set(id, h);
      this.update(id, { sandbox_json: JSON.stringify(h) });
      return h;
    }
    if (h) await this.deps.executor.destroy(h).catch((e) => this.deps.log.warn({ err: e, workspace: id }, 'removing a dead spare sandbox failed'));
    return this.startSandbox(this.get(id));
  }

  /** The sandboxes this runner holds now (for /metrics: src/telemetry/app-metrics.ts). */
  liveSandboxes(): SandboxHandle[] {
    return [...this.handles.values()];
  }

  private async stopSandbox(id: string): Promise<void> {
    const h = this.handles.get(id) ?? this.storedHandle(id);
    if (h) {
      try {
        await this.deps.executor.destroy(h);
      } catch (e) {
        this.deps.log.warn({ err: e, workspace: id }, 'sandbox destroy failed');
      }
    }
    this.handles.delete(id);
    await this.egress.stop(id);
  }

  private storedHandle(id: string): SandboxHandle | null {
    const r = this.deps.db.prepare('SELECT sandbox_json FROM workspaces WHERE id = ?').get(id) as { sandbox_json: string | null } | undefined;
    return r?.sandbox_json ? (JSON.parse(r.sandbox_json) as SandboxHandle) : null;
  }

  /**
   * Runs git (or a short script) on a workspace's repository in a short-lived sandbox (also used by
   * GitService for fetch, pull and push); with a repository, its one-host network and credential
   * (src/services/git/ephemeral.ts).
   */
  async ephemeralGit(workspace: { id: string }, command: string, opts: EphemeralGitOptions = {}): Promise<ExecResult> {
    await this.ensureDisk(workspace.id);
    return this.runGit(workspace.id, command, opts);
  }

  /** ephemeralGit on a workspace whose filesystem the caller has just made sure of (the open's clone). */
  private runGit(id: string, command: string, opts: EphemeralGitOptions): Promise<ExecResult> {
    return runEphemeralGit(
      { executor: this.deps.executor, egress: this.egress, repoCredentials: this.deps.repoCredentials, repos: this.deps.repos, runDir: join(this.deps.config.dataDir, 'run'), ...this.ids },
      { id, repoDir: join(this.rootDir(id), 'repo'), limits: this.sandboxLimits },
      command,
      opts,
    );
  }

  // ---------- lifecycle ----------

  async open(openArgs: OpenArgs, principal: string, progress: (p: number, t?: number, m?: string) => void, signal: AbortSignal): Promise<Record<string, unknown>> {
    if (this.deps.sandboxDisabledReason)
      throw new ServiceError('FAILED_PRECONDITION', `workspaces are disabled: the service runs in unsafe development mode (${this.deps.sandboxDisabledReason}); see atelier doctor`, {});
    const repo = this.deps.repos.approve(openArgs.repositoryUrl);
    if (openArgs.toolkits.length || openArgs.allowToolkitWorkspaceChanges) {
      if (!this.deps.packages) throw new ServiceError('FAILED_PRECONDITION', 'toolkits: managed packages are not available in this build', { field: 'toolkits' });
      this.deps.packages.validateToolkits(openArgs.toolkits, openArgs.allowToolkitWorkspaceChanges === true);
    }
    let envId: string | null = null;
    if (openArgs.environmentId) {
      envId = this.deps.environments.resolve(openArgs.environmentId);
      if (openArgs.confirmEnvironmentInjection !== true)
        throw new ServiceError(
          'INVALID_ARGUMENT',
          `confirmEnvironmentInjection: must be true to inject the variables and secrets of environment ${openArgs.environmentId} into the workspace`,
          { field: 'confirmEnvironmentInjection', rule: 'required with environmentId' },
        );
    }
    const profile: NetworkProfile = openArgs.networkProfile ?? 'network-none';
    // An environment with a setup script: the workspace starts from a template (docs/templates.md).
    const plan = envId && this.deps.templates ? this.deps.templates.plan(envId, repo.url, { ref: openArgs.ref ?? null, fetchDepth: openArgs.fetchDepth ?? null, shallowSince: openArgs.shallowSince ?? null }) : null;
    // A spare sandbox started ahead of time (its daemon up, its filesystem mounted) when this open can use one.
    const spare = this.takeSpareSandbox(profile, envId);
    const id = spare?.id ?? newId('workspace');
    const now = Date.now();
    const hard = new Date(now + this.deps.config.maxWorkspaceLifetimeSeconds * 1000).toISOString();
    const lease = this.leaseEnd(now, this.deps.config.idleLeaseSeconds, hard);
    this.deps.db
      .prepare(
        `INSERT INTO workspaces (id, owner_id, repository_url, ref, fetch_depth, shallow_since, network_profile, environment_id, env_injected, options_json, state, created_at, last_activity_at, lease_expires_at, hard_expires_at)
         VALUES (?, 'owner', ?, ?, ?, ?, ?, ?, ?, ?, 'opening', ?, ?, ?, ?)`,
      )
      .run(id, repo.url, openArgs.ref ?? null, openArgs.fetchDepth ?? null, openArgs.shallowSince ?? null, profile, envId, envId ? 1 : 0,
        JSON.stringify({ toolkits: openArgs.toolkits, skillSets: openArgs.skillSets, skillOverrides: openArgs.skillOverrides, allowToolkitWorkspaceChanges: openArgs.allowToolkitWorkspaceChanges === true }),
        new Date(now).toISOString(), new Date(now).toISOString(), lease, hard);
    return this.locked(id, async () => {
      let sandbox: Promise<SandboxHandle> | undefined;
      const t0 = Date.now();
      const took: Record<string, number> = {};
      let template: TemplateOpen | undefined;
      try {
        if (plan) {
          // From a template: its image copied (built first when none matches), then the
          // workspace's own sandbox, then the maintenance script (templates/open.ts).
          template = await openFromTemplate(this.templateHost(repo, openArgs), id, plan, progress, signal);
          sandbox = Promise.resolve(template.sandbox);
        }
        if (!template) {
          progress(0, 3, `cloning ${repo.url}`);
          // The workspace sandbox (its daemon's start-up is most of an open's fixed cost) was started
          // ahead of time (the spare), or starts now while the clone runs: both only need the
          // workspace's filesystem, and the daemon touches nothing in the checkout until it is asked to.
          if (spare) void rm(this.spareFile, { force: true }); // the workspace's row now names it
          // A spare's filesystem was mounted when it was made (checked again only if that failed).
          await (spare ? spare.disk.catch(() => this.ensureDisk(id)) : this.ensureDisk(id));
          took.diskMs = Date.now() - t0;
          sandbox = spare ? this.adoptSpare(id, spare.ready) : this.startSandbox(this.get(id));
          sandbox.then(() => (took.sandboxReadyMs = Date.now() - t0)).catch(() => undefined); // awaited below, or by the cleanup
          const { head, branch } = await this.clone(id, repo, openArgs, signal);
          took.clonedMs = Date.now() - t0;
          progress(1, 3, 'starting the sandbox');
          await sandbox;
          progress(2, 3, 'reading the checkout');
          this.update(id, { head_oid: head, branch });
        }
        const head = this.get(id).headOid;
        this.update(id, { state: 'active' });
        this.setOption(id, 'cloneOid', head);
        this.deps.principals.setActiveWorkspace(principal, id);
        // Repository extensions (issue #19): the workspace's skill configuration, then activated on_workspace_open hooks (reported, never fatal).
        const hooks = await this.deps.hooks?.opened(id, { repositoryUrl: repo.url, skillSets: openArgs.skillSets, skillOverrides: openArgs.skillOverrides }, signal);
        progress(3, 3, 'ready');
        this.deps.log.debug({ workspace: id, ...took, totalMs: Date.now() - t0 }, 'workspace opened');
        // For the next open, now that this one is done: the disk image at once, the sandbox (a daemon
        // start, the heavier part) a moment later, out of the way of this workspace's first commands.
        this.prepareSpareDisk();
        this.scheduleSpareSandbox();
        return { ...this.describe(this.get(id)), ...(hooks ? { hooks: [hooks] } : {}), ...(template ? { template: template.result } : {}) };
      } catch (err) {
        await sandbox?.catch(() => undefined);
        await this.stopSandbox(id);
        await this.removeFiles(id).catch((e) => this.deps.log.error({ err: e, workspace: id }, 'cleanup after a failed open failed'));
        this.deps.db.prepare('DELETE FROM workspaces WHERE id = ?').run(id);
        if (spare) this.scheduleSpareSandbox(); // the next open gets one all the same
        throw err;
      }
    });
  }

  /** What an open from a template works with (templates/open.ts): this service's own steps, lent. */
  private templateHost(repo: ParsedRepoUrl, openArgs: OpenArgs): TemplateHost {
    return {
      templates: this.deps.templates!,
      ref: openArgs.ref ?? null,
      imagePath: (id) => this.imageOf(id),
      rootDir: (id) => this.rootDir(id),
      ensureDisk: (id) => this.ensureDisk(id),
      clone: (id, signal) => this.clone(id, repo, openArgs, signal),
      remoteOid: (id, signal) => this.remoteOid(id, repo, openArgs.ref, signal),
      // The setup sandbox: the workspace user, dependency-access, the entries given (setup-only included), no managed packages.
      startSetupSandbox: async (id, env) =>
        this.deps.executor.create({ id, rootDir: this.rootDir(id), limits: this.sandboxLimits, network: await this.startWorkspaceProxy(id, 'dependency-access'), env, mounts: [] }),
      startWorkspaceSandbox: (id) => this.startSandbox(this.get(id)),
      exec: (h, req, onOutput, signal) => this.deps.executor.exec(h, req, onOutput, signal),
      stopSandbox: async (id, h) => {
        if (h) await this.deps.executor.destroy(h);
        await this.egress.stop(id);
      },
      detachDisk: async (id) => (await detachTemplateDisk(this.rootDir(id)), this.imageOf(id)),
      removeFiles: (id) => this.removeFiles(id),
      noteHead: (id, head, branch) => this.update(id, { head_oid: head, branch }),
    };
  }

  /**
   * The commit a ref names on the repository now (git ls-remote in a short-lived sandbox with the
   * repository host's network and credential, in an empty root-owned directory). A full commit id
   * is its own answer; a short one gives null (reading it needs a fetch).
   */
  private async remoteOid(id: string, repo: ParsedRepoUrl, ref: string | undefined, signal: AbortSignal): Promise<string | null> {
    if (ref && SHA_RE.test(ref)) return ref.length === 40 || ref.length === 64 ? ref : null;
    const dir = await mkdtemp(join(this.deps.config.dataDir, 'run', 'lsr-'));
    try {
      await chmod(dir, 0o755);
      const script = ref ? `${GIT_BIN} ls-remote "$REPO" "refs/heads/$REF" "refs/tags/$REF"` : `${GIT_BIN} ls-remote "$REPO" HEAD`;
      const r = await runEphemeralGit(
        { executor: this.deps.executor, egress: this.egress, repoCredentials: this.deps.repoCredentials, repos: this.deps.repos, runDir: join(this.deps.config.dataDir, 'run'), ...this.ids },
        { id, repoDir: dir, limits: this.sandboxLimits },
        script,
        { neutralise: false, repo, env: { REPO: repo.url, REF: ref ?? '' }, signal, timeoutMs: 120_000 },
      );
      if (r.exitCode !== 0) throw gitFailure('ls-remote', r);
      const refs = new Map(r.stdout.trim().split('\n').map((l) => l.split('\t') as [string, string]).map(([oid, name]) => [name, oid]));
      const oid = ref ? (refs.get(`refs/heads/${ref}`) ?? refs.get(`refs/tags/${ref}^{}`) ?? refs.get(`refs/tags/${ref}`)) : refs.get('HEAD');
      return oid && SHA_RE.test(oid) ? oid : null;
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** Clones into the workspace's filesystem; returns the checked-out commit and branch (null when detached), read by the same script. */
  private async clone(id: string, repo: ParsedRepoUrl, openArgs: OpenArgs, signal: AbortSignal): Promise<{ head: string | null; branch: string | null }> {
    const depthArgs = openArgs.shallowSince ? `--shallow-since="$SINCE"` : openArgs.fetchDepth === 0 ? '' : `--depth=${openArgs.fetchDepth ?? 1}`;
    const ref = openArgs.ref;
    // Shell script inside the sandbox; every value arrives as an environment variable, never spliced into the script.
    const script = ref && SHA_RE.test(ref)
      ? `set -e; ${GIT_BIN} init -q .; ${GIT_BIN} remote add origin "$REPO"; ${GIT_BIN} fetch -q ${depthArgs} origin "$REF"; ${GIT_BIN} checkout -q --detach FETCH_HEAD`
      : `set -e; ${GIT_BIN} clone -q ${depthArgs} ${ref ? '--branch "$REF"' : ''} "$REPO" .`;
    // What was checked out, read in the same sandbox (one sandbox fewer on the way to the first command).
    const report = `; printf '\\n%s\\n' "$(${GIT_BIN} rev-parse HEAD)"; ${GIT_BIN} symbolic-ref --short -q HEAD || echo '(detached)'`;
    // No repository config exists before this script makes one (from these arguments only), so
    // there is no repository driver to neutralise: the usual preamble (a git process) is skipped.
    const r = await this.runGit(id, script + report, { neutralise: false, repo, env: { REPO: repo.url, REF: ref ?? '', SINCE: openArgs.shallowSince ?? '' }, signal });
    if (r.exitCode !== 0) throw gitFailure('clone', r);
    const [head, branch] = r.stdout.trim().split('\n').slice(-2);
    return { head: head && SHA_RE.test(head) ? head : null, branch: !branch || branch === '(detached)' ? null : branch };
  }

  describe(workspace: WorkspaceRow): Record<string, unknown> {
    return {
      workspaceId: workspace.id,
      state: workspace.state,
      repositoryUrl: workspace.repositoryUrl,
      ref: workspace.ref,
      branch: workspace.branch,
      headOid: workspace.headOid,
      networkProfile: workspace.networkProfile,
      environmentId: workspace.environmentId,
      environmentInjected: workspace.envInjected,
      createdAt: workspace.createdAt,
      lastActivityAt: workspace.lastActivityAt,
      leaseExpiresAt: workspace.leaseExpiresAt,
      hardExpiresAt: workspace.hardExpiresAt,
      ...(workspace.stateReason ? { stateReason: workspace.stateReason } : {}),
      ...(workspace.closedAt ? { closedAt: workspace.closedAt } : {}),
    };
  }

  private readonly listStatements: { first?: Statement; after?: Statement } = {};

  list(cursor: string | undefined, limit: number): Record<string, unknown> {
    let after: { c: string; i: string } | null = null;
    if (cursor) after = this.deps.cursors.decode<{ c: string; i: string }>('workspace_list', cursor);
    // The two statements are kept: preparing one on every call was most of a workspace_list (#21 item 5).
    const key = after ? 'after' : 'first';
    const stmt = (this.listStatements[key] ??= this.deps.db.prepare(
      `SELECT * FROM workspaces WHERE state != 'closed' ${after ? 'AND (created_at < ? OR (created_at = ? AND id < ?))' : ''} ORDER BY created_at DESC, id DESC LIMIT ?`,
    ));
    const rows = stmt.all(...(after ? [after.c, after.c, after.i] : []), limit + 1) as Array<Record<string, unknown>>;
    const page = rows.slice(0, limit).map((r) => this.describe(rowOf(r)));
    const last = rows.length > limit ? rowOf(rows[limit - 1]!) : null;
    return { workspaces: page, nextCursor: last ? this.deps.cursors.encode('workspace_list', { c: last.createdAt, i: last.id }) : null };
  }

  /** The live handle of an active workspace; refreshes its idle lease. Refuses other states clearly. */
  async activeHandle(id: string): Promise<SandboxHandle> {
    const workspace = this.get(id);
    if (workspace.state === 'expired_recoverable')
      throw new ServiceError('FAILED_PRECONDITION', `workspace ${id} expired after being idle; resume it with workspace_lease_renew or workspace_recover (mode resume)`, { workspaceId: id, state: workspace.state });
    if (workspace.state === 'closed') throw new ServiceError('NOT_FOUND', `workspace ${id} was closed and its files removed`, { workspaceId: id, state: workspace.state });
    if (workspace.state !== 'active') throw new ServiceError('FAILED_PRECONDITION', `workspace ${id} is ${workspace.state}`, { workspaceId: id, state: workspace.state });
    this.touch(workspace);
    const h = this.handles.get(id);
    if (h && (await this.deps.executor.alive(h))) return h;
    return this.restartSandbox(id, h ? 'the sandbox daemon had died' : 'no sandbox was running');
  }

  /**
   * Starts the sandbox of an active workspace again (its daemon died, e.g. of a `kill -9 -1` from
   * inside, or none runs): leftovers are killed, the files (the checkout) are kept. Concurrent
   * callers share one restart. Not under the lifecycle lock, so a locked operation may call it.
   */
  private restartSandbox(id: string, why: string): Promise<SandboxHandle> {
    const running = this.restarting.get(id);
    if (running) return running;
    const pending = (async () => {
      const old = this.handles.get(id) ?? this.storedHandle(id);
      this.handles.delete(id);
      // Why it died (exit status, its last stderr lines, the cgroup's OOM kills), read before the stop clears it (issue #35).
      const death = old ? await this.deps.executor.daemonDeath?.(old).catch(() => undefined) : undefined;
      if (old) await this.deps.executor.stop(old).catch((e) => this.deps.log.warn({ err: e, workspace: id }, 'stopping a dead sandbox failed'));
      if (old) {
        const prev = this.deaths.get(id);
        const cause = death ? describeDeath(death) : undefined;
        this.deaths.set(id, { at: nowIso(), restarts: (prev?.restarts ?? 0) + 1, cause });
        this.deps.log.warn({ workspace: id, why, ...(death ? { daemonExit: death.exit, oomKills: death.oomKills, daemonStderr: death.stderrTail } : {}) }, 'workspace sandbox restarted');
        this.deps.audit.record({ actor: 'system', action: 'workspace_sandbox_restart', target: id, outcome: 'ok', reason: cause ? `${why}: ${cause}`.slice(0, 1000) : why });
      }
      return this.startSandbox(this.get(id));
    })();
    this.restarting.set(id, pending);
    return pending.finally(() => {
      if (this.restarting.get(id) === pending) this.restarting.delete(id);
    });
  }

  /** running: the daemon answers; died: it was started and is gone (restarted on the next call or resume); stopped: not started (expired, closed, or not yet after a restart). */
  private async sandboxState(id: string): Promise<'running' | 'died' | 'stopped'> {
    const h = this.handles.get(id);
    if (!h) return 'stopped';
    return (await this.deps.executor.alive(h)) ? 'running' : 'died';
  }

  /** Activity moves the idle lease (at most one write per 5 s per workspace). */
  touch(workspace: WorkspaceRow): void {
    const now = Date.now();
    if ((this.lastTouch.get(workspace.id) ?? 0) > now - 5_000) return;
    this.lastTouch.set(workspace.id, now);
    this.update(workspace.id, { last_activity_at: new Date(now).toISOString(), lease_expires_at: this.leaseEnd(now, this.deps.config.idleLeaseSeconds, workspace.hardExpiresAt) });
  }

  /** The git tools record the live branch and HEAD after changing them (workspace_status, workspace_context). */
  noteHead(id: string, branch: string | null, headOid: string | null): void {
    this.update(id, { branch, head_oid: headOid });
  }

  async exec(id: string, req: ExecRequest, onOutput?: (s: 'stdout' | 'stderr', c: Buffer) => void, signal?: AbortSignal): Promise<ExecResult> {
    const h = await this.activeHandle(id);
    // Streaming callers are the async operations and tasks (CommandService.launch): they keep what
    // their command leaves running. A foreground command's leftovers die with it.
    return this.deps.executor.exec(h, req, onOutput, signal);
  }

  async status(id: string): Promise<Record<string, unknown>> {
    const workspace = this.get(id);
    const state = workspace.state === 'active' ? await this.sandboxState(id) : 'stopped';
    const death = this.deaths.get(id);
    return {
      ...this.describe(workspace),
      sandboxRunning: state === 'running',
      sandboxState: state,
      ...(await this.sandboxNote(id, state, death)),
      ...(state === 'stopped' ? {} : this.sandboxPlacement(id)),
      ...(death ? { sandboxRestarts: death.restarts, sandboxLastRestartAt: death.at } : {}),
      gitIdentity: workspace.gitIdentity,
    };
  }

  /**
   * What the workspace's sandbox is (issue #34, docs/decisions.md): sandboxKind bubblewrap,
   * kubernetes-pod or kubernetes-sandbox, and for a cluster the object (apiVersion, kind,
   * namespace, name, Pod). Only while the runner holds a sandbox for it (not when stopped).
   */
  private sandboxPlacement(id: string): Record<string, unknown> {
    const h = this.handles.get(id);
    if (!h) return {};
    const p = h.placement;
    return { sandboxKind: sandboxKind(h), ...(p ? { sandboxObject: { apiVersion: p.apiVersion, kind: p.objectKind, namespace: p.namespace, name: p.name, pod: p.pod } } : {}) };
  }

  /**
   * workspace_status's sandboxNote (an existing field; the schema is the spec's): while the daemon
   * is dead, why it died as far as the runner can tell; after a restart, the last death's cause.
   */
  private async sandboxNote(id: string, state: 'running' | 'died' | 'stopped', death: { at: string; cause?: string } | undefined): Promise<{ sandboxNote?: string }> {
    if (state === 'died') {
      const h = this.handles.get(id);
      const d = h ? await this.deps.executor.daemonDeath?.(h).catch(() => undefined) : undefined;
      return { sandboxNote: `the sandbox daemon is gone (its processes ended${d ? `; ${describeDeath(d)}` : ''}); the next call or workspace_recover (mode resume) starts it again with the files intact` };
    }
    if (state === 'running' && death) {
      return { sandboxNote: `the sandbox daemon died at ${death.at}${death.cause ? ` (${death.cause})` : ''} and was started again with the files intact; the shells and sessions it ran ended with it` };
    }
    return {};
  }

  /** What this workspace may do, and the repohost actions for its repository. Mints no tokens. */
  capabilities(id: string): Record<string, unknown> {
    const workspace = this.get(id);
    const repo = parseRepoUrl(workspace.repositoryUrl);
    const cred = this.deps.repoCredentials.match(repo);
    const hasCredential = cred !== null;
    return {
      workspaceId: id,
      state: workspace.state,
      repository: { url: workspace.repositoryUrl, host: repo.authority },
      network: { profile: workspace.networkProfile, egress: workspace.networkProfile === 'dependency-access' ? 'configured package registries only, through the egress proxy' : 'none (loopback only)' },
      git: { fetch: true, push: hasCredential, credentialSource: cred ? `broker (${cred.kind === 'github_app' ? 'GitHub App installation token, minted per operation' : 'owner-managed token'})` : 'none: the owner has no repository credential covering this repository (atelier credentials add-token|add-github-app); pushes will be refused by the host' },
      commands: { exec: true, privileged: 'approval required (approvalGrantToken from the owner)' },
      packages: { enabled: this.deps.config.packagesEnabled },
      environment: { id: workspace.environmentId, injected: workspace.envInjected },
      repohostActions: [] as string[],
      repohost: { available: false, reason: 'repository-host operations (issues, pull requests, reviews) are not available in this build: see docs/STATUS.md' },
      tokensMinted: false,
    };
  }

  async context(
    id: string,
    args: { clientProfile: string; include: string[]; contentMode: 'none' | 'excerpt'; cursor?: string; limit: number; maxBytes: number },
    signal: AbortSignal,
  ): Promise<Record<string, unknown>> {
    const handle = await this.activeHandle(id);
    const workspace = this.get(id);
    const ident = await this.deps.executor.exec(handle, { command: 'git config --get user.name; echo ---; git config --get user.email', env: gitConfigEnv(), timeoutMs: 10_000 });
    const [name, email] = ident.stdout.split('---').map((x) => x.trim());
    const overview = (await this.deps.executor.request(handle, 'overview', {
      root: '/workspace',
      clientProfile: args.clientProfile as ClientProfile,
      include: args.include as OverviewSection[],
      contentMode: args.contentMode,
      maxBytes: args.maxBytes,
    }, { signal, timeoutMs: 30_000 })) as Record<string, unknown>;
    // Pages run over the entries of the included sections, in include order.
    const sections: Array<[string, string]> = [
      ['instructions', 'instructions'],
      ['languages', 'languages'],
      ['test_commands', 'testCommands'],
      ['skills', 'skills'],
    ];
    const entries: Array<{ section: string; item: unknown }> = [];
    for (const [inc, key] of sections) {
      if (!args.include.includes(inc)) continue;
      for (const item of (overview[key] as unknown[] | undefined) ?? []) entries.push({ section: key, item });
    }
    const start = args.cursor ? this.deps.cursors.decode<{ o: number; w: string }>('workspace_context', args.cursor).o : 0;
    const page = entries.slice(start, start + args.limit);
    const repositoryOverview: Record<string, unknown[]> = {};
    for (const [inc, key] of sections) if (args.include.includes(inc)) repositoryOverview[key] = [];
    for (const e of page) repositoryOverview[e.section]!.push(e.item);
    const next = start + args.limit < entries.length ? this.deps.cursors.encode('workspace_context', { o: start + args.limit, w: id }) : null;
    return {
      activeWorkspaceId: id,
      repositoryUrl: workspace.repositoryUrl,
      branch: workspace.branch,
      headOid: workspace.headOid,
      leaseExpiresAt: workspace.leaseExpiresAt,
      hardExpiresAt: workspace.hardExpiresAt,
      leaseRemainingSeconds: Math.max(0, Math.floor((Date.parse(workspace.leaseExpiresAt) - Date.now()) / 1000)),
      gitIdentity: name || email ? { name: name || null, email: email || null } : null,
      clientProfile: args.clientProfile,
      contentMode: args.contentMode,
      repositoryOverview,
      partial: overview.partial === true,
      filesScanned: overview.filesScanned,
      totalEntries: entries.length,
      nextCursor: next,
    };
  }

  secretsList(workspaceId: string | undefined, args: { environmentId?: string; query?: string; cursor?: string; limit: number }): Record<string, unknown> {
    let envId = args.environmentId ?? null;
    if (!envId && workspaceId) envId = this.get(workspaceId).environmentId;
    const offset = args.cursor ? this.deps.cursors.decode<{ o: number }>('secrets_list', args.cursor).o : 0;
    const { items, more } = this.deps.environments.listSecrets(envId, args.query, offset, args.limit);
    return {
      environmentId: envId,
      secrets: items.map((i) => ({ name: i.name, scope: i.scope === 'global' ? 'global' : 'environment', description: i.description })),
      nextCursor: more ? this.deps.cursors.encode('secrets_list', { o: offset + args.limit }) : null,
      note: 'values are never shown; commands see injected secrets as environment variables of the same name',
    };
  }

  setActive(principal: string, id: string): Record<string, unknown> {
    const w = this.get(id);
    if (w.state === 'closed') throw new ServiceError('FAILED_PRECONDITION', `workspaceId: workspace ${id} is closed`, { field: 'workspaceId' });
    this.deps.principals.setActiveWorkspace(principal, id);
    return { activeWorkspaceId: id, state: w.state };
  }

  async renew(id: string, extensionSeconds: number | undefined): Promise<Record<string, unknown>> {
    return this.locked(id, async () => {
      const workspace = this.get(id);
      if (workspace.state === 'closed') throw new ServiceError('NOT_FOUND', `workspace ${id} was closed`, { workspaceId: id });
      if (workspace.state === 'opening') throw new ServiceError('FAILED_PRECONDITION', `workspace ${id} is still opening`, { workspaceId: id });
      const ext = extensionSeconds ?? this.deps.config.idleLeaseSeconds;
      const now = Date.now();
      const requested = new Date(now + ext * 1000).toISOString();
      const capped = Date.parse(requested) > Date.parse(workspace.hardExpiresAt);
      const leaseExpiresAt = capped ? workspace.hardExpiresAt : requested;
      const reactivated = workspace.state === 'expired_recoverable';
      let restarted = false;
      if (reactivated) {
        this.update(id, { state: 'active', state_reason: null });
        await this.startSandbox(this.get(id));
      } else if ((await this.sandboxState(id)) !== 'running') {
        // Active, but its sandbox died (or none runs): resume means working again.
        await this.restartSandbox(id, 'resumed with its sandbox not running');
        restarted = true;
      }
      this.update(id, { lease_expires_at: leaseExpiresAt, last_activity_at: new Date(now).toISOString() });
      this.lastTouch.set(id, now);
      const result: Record<string, unknown> = { workspaceId: id, state: 'active', leaseExpiresAt, hardExpiresAt: workspace.hardExpiresAt, leaseCapped: capped, reactivated, sandboxRestarted: restarted, leaseWarnings: [] as string[] };
      if (capped) {
        result.requestedExpiresAt = requested;
        (result.leaseWarnings as string[]).push(`the lease was capped at hardExpiresAt (${workspace.hardExpiresAt}): a workspace never outlives its maximum lifetime; push or export your work before then`);
      }
      return result;
    });
  }

  async close(id: string): Promise<Record<string, unknown>> {
    return this.locked(id, async () => {
      const w = this.get(id);
      if (w.state === 'closed') return { workspaceId: id, state: 'closed', alreadyClosed: true, closedAt: w.closedAt };
      await this.removeEverything(id, 'closed by workspace_close');
      return { workspaceId: id, state: 'closed', alreadyClosed: false, closedAt: this.get(id).closedAt, filesRemoved: true };
    });
  }

  private async removeEverything(id: string, reason: string): Promise<void> {
    for (const hook of this.deps.onClose ?? []) await hook(id).catch((e) => this.deps.log.error({ err: e, workspace: id }, 'close hook failed'));
    await this.stopSandbox(id);
    await this.removeFiles(id);
    this.deps.principals.forgetWorkspace(id);
    this.update(id, { state: 'closed', state_reason: reason, closed_at: nowIso(), sandbox_json: null });
  }

  private async expire(id: string): Promise<void> {
    await this.stopSandbox(id);
    this.update(id, { state: 'expired_recoverable', state_reason: 'idle lease lapsed; processes stopped, files kept' });
    this.deps.audit.record({ actor: 'system', action: 'workspace_expire', target: id, outcome: 'ok', reason: 'idle lease lapsed' });
  }

  // ---------- checkpoints and forks (issue #33: src/services/checkpoints.ts calls these) ----------

  /** Checkpoints and forks copy a workspace's filesystem image: refused when workspaces have none (sandboxDiskMb 0). */
  private requireImages(field: string): void {
    if (!this.deps.executor.storage?.image || !this.deps.executor.storage.copies)
      throw new ServiceError('NOT_SUPPORTED', `${field}: checkpoints and forks copy a workspace's filesystem image on this host, which this executor does not keep (under --executor kubernetes a workspace's files are on its claim in the cluster; docs/scaling.md)`, { field, executor: this.deps.config.executor });
    if (this.deps.config.sandboxDiskMb <= 0)
      throw new ServiceError('FAILED_PRECONDITION', `${field}: checkpoints and forks need each workspace on its own filesystem (--sandbox-disk-mb above 0; it is ${this.deps.config.sandboxDiskMb} here)`, { field, setting: 'sandboxDiskMb' });
  }

  /** The host file of a workspace's filesystem (the driver's storage keeps it; requireImages checked it can). */
  private imageOf(id: string): string {
    const img = this.deps.executor.storage?.image?.(id);
    if (!img) throw new ServiceError('FAILED_PRECONDITION', 'checkpoints and forks need each workspace on its own filesystem (--sandbox-disk-mb above 0)', { setting: 'sandboxDiskMb' });
    return img;
  }

  /** A workspace that can be checkpointed, restored or forked: not closed, not opening. */
  private usable(id: string, field: string): WorkspaceRow {
    const w = this.get(id);
    if (w.state === 'closed') throw new ServiceError('NOT_FOUND', `${field}: workspace ${id} was closed and its files removed`, { field, state: w.state });
    if (w.state === 'opening') throw new ServiceError('FAILED_PRECONDITION', `${field}: workspace ${id} is still opening`, { field, state: w.state });
    return w;
  }

  /**
   * Runs fn under the workspace's lifecycle lock (no git tool, restore or close in between) with
   * its filesystem mounted; fn gets the mount point, the image and a freeze that stops every
   * process of its running sandbox for as long as it runs (src/sandbox/snapshot.ts).
   */
  async withDiskImage<T>(id: string, field: string, fn: (w: WorkspaceRow, disk: { rootDir: string; image: string; freeze: <R>(f: () => Promise<R>) => Promise<{ value: R; frozen: boolean }> }) => Promise<T>): Promise<T> {
    this.requireImages(field);
    return this.locked(id, async () => {
      const w = this.usable(id, field);
      await this.ensureDisk(id);
      const h = w.state === 'active' ? this.handles.get(id) : undefined;
      const running = h && this.deps.executor.whileFrozen && (await this.deps.executor.alive(h));
      const freeze = <R>(f: () => Promise<R>) => (running ? this.deps.executor.whileFrozen!(h!, f) : f().then((value) => ({ value, frozen: false })));
      return fn(w, { rootDir: this.rootDir(id), image: this.imageOf(id), freeze });
    });
  }

  /**
   * Replaces a workspace's filesystem with a prepared image (a restore): every process is stopped
   * first, the filesystem unmounted, the prepared file renamed over the image, mounted, and an
   * active workspace's sandbox started again. `prepare` makes the file at the path it is given
   * before anything is stopped; when it fails nothing changed.
   */
  async replaceDiskImage(id: string, field: string, prepare: (tmp: string) => Promise<void>): Promise<{ processesStopped: boolean; sandboxRestarted: boolean }> {
    this.requireImages(field);
    return this.locked(id, async () => {
      const w = this.usable(id, field);
      const img = this.imageOf(id);
      const tmp = `${img}.restore`;
      await rm(tmp, { force: true });
      try {
        await prepare(tmp);
      } catch (e) {
        await rm(tmp, { force: true });
        throw e;
      }
      const wasRunning = (await this.sandboxState(id)) === 'running';
      await this.stopSandbox(id);
      await this.deps.executor.storage!.unmount!(id, this.rootDir(id));
      await rename(tmp, img);
      await this.ensureDisk(id);
      if (w.state === 'active') await this.startSandbox(this.get(id));
      return { processesStopped: wasRunning, sandboxRestarted: w.state === 'active' };
    });
  }

  /** What a fork copies of its source: the repository, branch and head, environment and open options. */
  forkTemplate(id: string): ForkTemplate {
    const r = this.deps.db.prepare('SELECT * FROM workspaces WHERE id = ?').get(id) as Record<string, unknown> | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `workspaceId: no workspace ${id}`, { field: 'workspaceId' });
    const w = rowOf(r);
    return {
      workspaceId: w.id, repositoryUrl: w.repositoryUrl, ref: w.ref, branch: w.branch, headOid: w.headOid, networkProfile: w.networkProfile,
      environmentId: w.environmentId, envInjected: w.envInjected, options: JSON.parse((r.options_json as string) || '{}') as Record<string, unknown>,
    };
  }

  /**
   * Opens a new workspace (a fork) on the template's repository and branch, with its own id,
   * lease, hard expiry, cgroup limits, network profile and filesystem: `fill` writes the image at
   * the path it is given (a copy of a checkpoint, or a snapshot of a live workspace), then it is
   * mounted and its sandbox started. A failure removes everything of it. The caller's active
   * workspace is not changed (a fork is usually handed to an agent).
   */
  async openFork<T>(t: ForkTemplate, profile: NetworkProfile, forkedFrom: Record<string, unknown>, fill: (image: string) => Promise<T>): Promise<{ workspace: Record<string, unknown>; filled: T }> {
    this.requireImages('workspaceId');
    if (this.deps.sandboxDisabledReason) throw new ServiceError('FAILED_PRECONDITION', `workspaces are disabled: ${this.deps.sandboxDisabledReason}`, {});
    const repo = this.deps.repos.approve(t.repositoryUrl);
    const id = newId('workspace');
    const now = Date.now();
    const hard = new Date(now + this.deps.config.maxWorkspaceLifetimeSeconds * 1000).toISOString();
    const lease = this.leaseEnd(now, this.deps.config.idleLeaseSeconds, hard);
    const envId = t.environmentId && t.envInjected ? t.environmentId : null;
    this.deps.db
      .prepare(
        `INSERT INTO workspaces (id, owner_id, repository_url, ref, network_profile, environment_id, env_injected, options_json, state, branch, head_oid, created_at, last_activity_at, lease_expires_at, hard_expires_at)
         VALUES (?, 'owner', ?, ?, ?, ?, ?, ?, 'opening', ?, ?, ?, ?, ?, ?)`,
      )
      .run(id, repo.url, t.ref, profile, envId, envId ? 1 : 0, JSON.stringify({ ...t.options, forkedFrom }), t.branch, t.headOid,
        new Date(now).toISOString(), new Date(now).toISOString(), lease, hard);
    return this.locked(id, async () => {
      try {
        const filled = await fill(this.imageOf(id));
        await this.ensureDisk(id);
        await this.startSandbox(this.get(id));
        this.update(id, { state: 'active' });
        return { workspace: this.describe(this.get(id)), filled };
      } catch (err) {
        await this.stopSandbox(id);
        await this.removeFiles(id).catch((e) => this.deps.log.error({ err: e, workspace: id }, 'cleanup after a failed fork failed'));
        this.deps.db.prepare('DELETE FROM workspaces WHERE id = ?').run(id);
        throw err;
      }
    });
  }

  // ---------- recovery ----------

  private async gitIn(workspace: WorkspaceRow, command: string, env: Record<string, string> = {}): Promise<ExecResult> {
    if (workspace.state === 'active') return this.exec(workspace.id, { command: NEUTRALISE_REPO_DRIVERS + command, env: { ...gitConfigEnv(), ...env }, timeoutMs: 120_000, maxOutputBytes: 1_048_576 });
    return this.ephemeralGit(workspace, command, { env, timeoutMs: 120_000 });
  }

  /** The base unpushed work is measured against: the upstream branch, else the cloned commit. */
  private baseExpr(workspace: WorkspaceRow): string {
    return `$(git rev-parse -q --verify '@{upstream}' 2>/dev/null || echo ${workspace.cloneOid ?? 'HEAD'})`;
  }

  async recover(id: string, mode: 'resume' | 'status' | 'patch' | 'export', targetBranch: string | undefined, principal: string): Promise<Record<string, unknown>> {
    const workspace = this.get(id);
    if (workspace.state === 'closed') throw new ServiceError('NOT_FOUND', `workspace ${id} was closed and its files removed; nothing to recover`, { workspaceId: id });
    if (workspace.state === 'opening') throw new ServiceError('FAILED_PRECONDITION', `workspace ${id} is still opening`, { workspaceId: id });
    if (mode === 'resume') {
      const r = await this.renew(id, undefined);
      this.deps.principals.setActiveWorkspace(principal, id);
      return { mode, ...r };
    }
    return this.locked(id, async () => {
      const base = this.baseExpr(workspace);
      if (mode === 'status') {
        const r = await this.gitIn(workspace, `set -e; b=${base}; echo "HEAD $(git rev-parse HEAD)"; echo "BASE $b"; git log --format='C %H %s' "$b..HEAD"; git status --porcelain=v1 -uall | sed 's/^/S /'`);
        if (r.exitCode !== 0) throw gitFailure('status', r);
        const lines = r.stdout.split('\n');
        return {
          mode,
          workspaceId: id,
          state: workspace.state,
          headOid: lines.find((l) => l.startsWith('HEAD '))?.slice(5) ?? null,
          baseOid: lines.find((l) => l.startsWith('BASE '))?.slice(5) ?? null,
          unpushedCommits: lines.filter((l) => l.startsWith('C ')).map((l) => ({ oid: l.slice(2, 42), subject: l.slice(43) })),
          uncommittedChanges: lines.filter((l) => l.startsWith('S ')).map((l) => ({ status: l.slice(2, 4).trim(), path: l.slice(5) })),
          hardExpiresAt: workspace.hardExpiresAt,
          leaseExpiresAt: workspace.leaseExpiresAt,
        };
      }
      // Uncommitted work (tracked and untracked) as a commit object made with a temporary index:
      // the workspace's own index and branches are untouched.
      const snapshot = `export GIT_INDEX_FILE="$(mktemp)"; cp .git/index "$GIT_INDEX_FILE" 2>/dev/null || true; git add -A; tree=$(git write-tree); rm -f "$GIT_INDEX_FILE"; unset GIT_INDEX_FILE; if [ "$tree" = "$(git rev-parse 'HEAD^{tree}')" ]; then snap=$(git rev-parse HEAD); else snap=$(git -c user.name='Atelier recovery' -c user.email='recovery@atelier.invalid' commit-tree "$tree" -p HEAD -m 'Uncommitted work saved by workspace_recover'); fi`;
      if (mode === 'patch') {
        const r = await this.gitIn(workspace, `set -e; b=${base}; ${snapshot}; git format-patch --stdout --no-signature "$b..$snap"`);
        if (r.exitCode !== 0) throw gitFailure('patch', r);
        return { mode, workspaceId: id, patch: r.stdout, bytes: Buffer.byteLength(r.stdout), truncated: r.stdoutTruncated === true, empty: r.stdout.trim() === '' };
      }
      // export: push the snapshot to targetBranch through the broker.
      if (!targetBranch) throw new ServiceError('INVALID_ARGUMENT', 'targetBranch: required when mode is export', { field: 'targetBranch' });
      const check = await this.ephemeralGit(workspace, 'git check-ref-format --branch "$B"', { env: { B: targetBranch } });
      if (check.exitCode !== 0) throw new ServiceError('INVALID_ARGUMENT', `targetBranch: ${targetBranch} is not a valid branch name`, { field: 'targetBranch' });
      const repo = parseRepoUrl(workspace.repositoryUrl);
      this.deps.repos.approve(workspace.repositoryUrl);
      const r = await this.ephemeralGit(workspace, `set -e; ${snapshot}; git push -q origin "$snap:refs/heads/$B"; echo "$snap"`, { repo, env: { B: targetBranch } });
      if (r.exitCode !== 0) throw gitFailure('export push', r);
      const pushedOid = r.stdout.trim().split('\n').pop() ?? null;
      this.deps.audit.record({ actor: 'mcp', principal, action: 'workspace_recover_export', target: id, outcome: 'ok', details: { targetBranch, pushedOid } });
      return { mode, workspaceId: id, targetBranch, pushedOid, remote: workspace.repositoryUrl };
    });
  }

  // ---------- reaper and restart ----------

  /** Expires idle workspaces and removes those past their hard deadline. */
  async reap(): Promise<void> {
    const now = nowIso();
    const hard = this.deps.db.prepare("SELECT id FROM workspaces WHERE state != 'closed' AND state != 'opening' AND hard_expires_at <= ?").pluck().all(now) as string[];
    for (const id of hard) {
      await this.locked(id, async () => {
        await this.removeEverything(id, 'hard expiry: maximum workspace lifetime reached');
        this.deps.audit.record({ actor: 'system', action: 'workspace_hard_expire', target: id, outcome: 'ok' });
      }).catch((e) => this.deps.log.error({ err: e, workspace: id }, 'hard expiry failed'));
    }
    // Keep a connection to every live daemon: a daemon with no runner connection for its orphan
    // grace period exits (the bound for sandboxes whose runner never comes back, docs/sandbox.md),
    // so a dropped connection is re-made here, long before that.
    for (const [id, h] of this.handles) {
      await this.deps.executor.request(h, 'ping', {}, { timeoutMs: 5_000 }).catch(() => this.deps.log.debug({ workspace: id }, 'sandbox daemon did not answer the keep-alive ping'));
    }
    const spare = this.spareSandbox;
    if (spare) {
      const h = await spare.ready;
      const answered = h ? await this.deps.executor.request(h, 'ping', {}, { timeoutMs: 5_000 }).then(() => true, () => false) : true;
      if (!answered && this.spareSandbox === spare) {
        // Gone (killed from outside, or out of its orphan grace): a fresh one replaces it.
        this.spareSandbox = undefined;
        await this.discardSpare(spare.id, h);
        this.prepareSpareSandbox();
      }
    }
    const idle = this.deps.db.prepare("SELECT id FROM workspaces WHERE state = 'active' AND lease_expires_at <= ?").pluck().all(now) as string[];
    for (const id of idle) {
      await this.locked(id, async () => {
        const w = this.get(id);
        if (w.state === 'active' && Date.parse(w.leaseExpiresAt) <= Date.now()) await this.expire(id);
      }).catch((e) => this.deps.log.error({ err: e, workspace: id }, 'expiry failed'));
    }
  }

  /** After a (re)start: active workspaces work again; half-opened ones are cleaned up. */
  async startup(): Promise<void> {
    const opening = this.deps.db.prepare("SELECT id FROM workspaces WHERE state = 'opening'").pluck().all() as string[];
    for (const id of opening) {
      // Its sandbox (started while it cloned, or a spare it took) may still run.
      const h = this.storedHandle(id) ?? this.handleById(id);
      await this.deps.executor.destroy(h).catch((e) => this.deps.log.warn({ err: e, workspace: id }, 'stopping the sandbox of a half-opened workspace failed'));
      await this.removeFiles(id).catch((e) => this.deps.log.error({ err: e, workspace: id }, 'cleanup of a half-opened workspace failed'));
      this.deps.db.prepare('DELETE FROM workspaces WHERE id = ?').run(id);
    }
    await this.reap();
    // Template builds a stop interrupted: failed, their files removed (docs/templates.md).
    await this.deps.templates
      ?.recover({
        discard: async (id) => {
          await this.deps.executor.destroy(this.handleById(id)).catch((e) => this.deps.log.warn({ err: e, template: id }, 'stopping the sandbox of an interrupted template build failed'));
          await this.removeFiles(id);
        },
      })
      .catch((e) => this.deps.log.error({ err: e }, 'cleaning up interrupted template builds failed'));
    // A spare workspace sandbox an earlier runner left (no open took it): stopped and removed.
    const left = await readFile(this.spareFile, 'utf8').then((t) => (JSON.parse(t) as { id?: unknown }).id, () => undefined);
    if (typeof left === 'string' && /^[A-Za-z0-9_-]{1,100}$/.test(left) && !this.deps.db.prepare('SELECT 1 FROM workspaces WHERE id = ?').get(left)) await this.discardSpare(left, undefined);
    else await rm(this.spareFile, { force: true });
    if (this.deps.config.sandboxDiskMb > 0 && this.deps.executor.storage) {
      await this.deps.executor.storage.cleanSpares().catch((e) => this.deps.log.warn({ err: e }, 'removing stale spare disks failed'));
      this.prepareSpareDisk();
    }
    const active = this.deps.db.prepare("SELECT id FROM workspaces WHERE state = 'active'").pluck().all() as string[];
    for (const id of active) {
      await this.locked(id, () => this.startSandbox(this.get(id))).catch((e) => this.deps.log.error({ err: e, workspace: id }, 'could not restart workspace sandbox'));
    }
    // A service that has opened workspaces keeps a spare sandbox from the start; one that never has
    // (a fresh data directory) makes its first after its first open, not an idle sandbox for nothing.
    if (this.deps.db.prepare('SELECT 1 FROM workspaces LIMIT 1').get()) this.prepareSpareSandbox();
    const every = Math.max(1000, Math.min(15_000, (this.deps.config.idleLeaseSeconds * 1000) / 4));
    this.reaper = setInterval(() => void this.reap().catch((e) => this.deps.log.error({ err: e }, 'reaper failed')), every);
    this.reaper.unref();
  }

  /** On shutdown: stop the reaper and the proxies; sandboxes end with the runner. */
  async shutdown(): Promise<void> {
    this.stopping = true;
    if (this.reaper) clearInterval(this.reaper);
    if (this.spareTimer) clearTimeout(this.spareTimer);
    const spare = this.spareSandbox;
    this.spareSandbox = undefined;
    if (spare) await this.discardSpare(spare.id, await spare.ready);
    await this.spareDisk;
    // Lifecycle steps in flight finish first, but a stuck one must not keep the service from
    // stopping: after SHUTDOWN_LOCK_WAIT_MS the sandboxes are stopped under it (its call fails).
    if (!(await settlesWithin(this.deps.locks.settled('lifecycle'), SHUTDOWN_LOCK_WAIT_MS))) this.deps.log.warn({ busy: this.deps.locks.busy() }, 'shutdown: workspace operations still running; stopping their sandboxes');
    for (const id of [...this.handles.keys()]) {
      const h = this.handles.get(id)!;
      await this.deps.executor.stop(h).catch(() => undefined);
    }
    await this.egress.stopAll();
  }
}
