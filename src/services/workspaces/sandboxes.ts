/**
 * A workspace's disk and sandbox (docs/workspaces.md, docs/sandbox.md): the row read and written,
 * its filesystem mounted, its sandbox started with its egress proxy (or a spare started ahead of
 * time adopted), stopped, restarted after a death, and commands run in it; git in a short-lived
 * sandbox for the workspace's network operations. The base of the workspace service (lifecycle.ts).
 */
import { join } from 'node:path';
import { rm, writeFile } from 'node:fs/promises';
import type { Statement } from 'better-sqlite3';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';
import type { ExecRequest, ExecResult, SandboxHandle, SandboxLimits, SandboxNetwork, SandboxSpec } from '../../sandbox/executor.js';
import { describeDeath } from '../../sandbox/executor.js';
import type { EgressDecision } from '../../sandbox/egress.js';
import { loadEgressRules, WorkspaceEgress } from '../../sandbox/egress/workspace.js';
import { runEphemeralGit, type EphemeralGitOptions } from '../git/index.js';
import { Deps, NetworkProfile, SPARE_SANDBOX_DELAY_MS, WorkspaceRow, rowOf } from './records.js';

export class WorkspaceSandboxes {
  protected readonly handles = new Map<string, SandboxHandle>();
  /** The egress proxies of dependency-access workspaces and of network git operations (sandbox layer). */
  protected readonly egress: WorkspaceEgress;
  protected reaper: NodeJS.Timeout | undefined;
  protected readonly lastTouch = new Map<string, number>();
  protected readonly restarting = new Map<string, Promise<SandboxHandle>>();
  /** ensureDisk in progress per workspace: concurrent callers (an open's clone and its sandbox start) share one. */
  protected readonly disking = new Map<string, Promise<void>>();
  /** The spare disk image being formatted for the next open (sandbox/disk.ts). */
  protected spareDisk: Promise<void> | undefined;
  /**
   * The spare workspace sandbox: the sandbox of the next plain open (network-none, no environment,
   * no managed packages), started ahead of time under the workspace id that open will use, on its
   * own mounted filesystem, so an open does not wait for a daemon to start (see prepareSpareSandbox).
   * ready resolves undefined when starting it failed (the open then starts one as usual).
   */
  protected spareSandbox: { id: string; disk: Promise<void>; ready: Promise<SandboxHandle | undefined> } | undefined;
  protected spareTimer: NodeJS.Timeout | undefined;
  protected stopping = false;
  /** Sandboxes found dead and restarted, for workspace_status. */
  protected readonly deaths = new Map<string, { at: string; restarts: number; cause?: string }>();

  constructor(protected readonly deps: Deps) {
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

  protected get ids() {
    return { uid: this.deps.config.sandboxUid, gid: this.deps.config.sandboxUid };
  }

  /** Makes sure the workspace's own filesystem is mounted and its directories exist. */
  ensureDisk(id: string): Promise<void> {
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
  protected prepareSpareDisk(): void {
    const storage = this.deps.executor.storage;
    if (this.spareDisk || this.stopping || !storage || this.deps.config.sandboxDiskMb <= 0) return;
    this.spareDisk = storage
      .prepareSpare()
      .then(() => undefined)
      .catch((e) => this.deps.log.warn({ err: e }, 'preparing a spare workspace disk failed'))
      .finally(() => (this.spareDisk = undefined));
  }

  /** Where the id of the spare workspace sandbox is kept while it exists (a restarted runner removes what it left). */
  protected get spareFile(): string {
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
  protected prepareSpareSandbox(): void {
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
  protected scheduleSpareSandbox(): void {
    if (this.spareTimer || this.spareSandbox) return;
    this.spareTimer = setTimeout(() => {
      this.spareTimer = undefined;
      this.prepareSpareSandbox();
    }, SPARE_SANDBOX_DELAY_MS);
    this.spareTimer.unref();
  }

  /** The spare sandbox for an open that can use one (see prepareSpareSandbox); it is the caller's from now on. */
  protected takeSpareSandbox(profile: NetworkProfile, envId: string | null): { id: string; disk: Promise<void>; ready: Promise<SandboxHandle | undefined> } | undefined {
    if (profile !== 'network-none' || envId !== null || this.deps.config.packagesEnabled) return undefined;
    const s = this.spareSandbox;
    this.spareSandbox = undefined;
    return s;
  }

  /** Stops and removes a spare sandbox nobody took (shutdown, or one left by an earlier runner). */
  protected async discardSpare(id: string, started: SandboxHandle | undefined): Promise<void> {
    const handle = started ?? this.handleById(id);
    await this.deps.executor.destroy(handle).catch((e) => this.deps.log.warn({ err: e }, 'stopping the spare workspace sandbox failed'));
    await this.removeFiles(id).catch((e) => this.deps.log.warn({ err: e }, 'removing the spare workspace files failed'));
    await rm(this.spareFile, { force: true });
  }

  /** A handle for stopping a sandbox an earlier runner left, by id (its cgroups are found by id; the pid is only used without cgroups). */
  protected handleById(id: string): SandboxHandle {
    return { id, socketPath: '', pid: -1 };
  }

  /** Deletes every file of a workspace (its filesystem, or its directory tree). */
  async removeFiles(id: string): Promise<void> {
    await this.deps.executor.storage?.remove(id, this.rootDir(id));
  }

  /** Serialises lifecycle changes per workspace (open, renew, recover, close, reaping), and against the mutating git tools. */
  protected locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
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

  protected update(id: string, fields: Record<string, unknown>): void {
    const keys = Object.keys(fields);
    this.deps.db.prepare(`UPDATE workspaces SET ${keys.map((k) => `${k} = ?`).join(', ')} WHERE id = ?`).run(...keys.map((k) => fields[k]), id);
  }

  protected setOption(id: string, key: string, value: unknown): void {
    const r = this.deps.db.prepare('SELECT options_json FROM workspaces WHERE id = ?').get(id) as { options_json: string };
    const opts = JSON.parse(r.options_json || '{}');
    opts[key] = value;
    this.update(id, { options_json: JSON.stringify(opts) });
  }

  protected leaseEnd(fromMs: number, seconds: number, hardIso: string): string {
    return new Date(Math.min(fromMs + seconds * 1000, Date.parse(hardIso))).toISOString();
  }

  protected logDecision = (d: EgressDecision) => {
    this.deps.log.info({ egress: d }, d.allowed ? 'egress allowed' : 'egress refused');
  };

  /** The sandbox network of a profile: dependency-access (re)starts the workspace's egress proxy (src/sandbox/egress/workspace.ts). */
  protected async startWorkspaceProxy(id: string, profile: NetworkProfile): Promise<SandboxNetwork> {
    if (profile === 'network-none') return 'none';
    return { proxySocket: await this.egress.start(id) };
  }

  protected async specFor(workspace: WorkspaceRow, network: SandboxNetwork): Promise<SandboxSpec> {
    const env: Record<string, string> = {};
    // Managed-package releases bound when this workspace's sandbox was first made (kept until it is recreated).
    const pkgs = (await this.deps.packages?.mountsFor(workspace.id)) ?? { mounts: [], env: {} };
    Object.assign(env, pkgs.env);
    if (workspace.envInjected && workspace.environmentId) Object.assign(env, this.deps.environments.injection(workspace.environmentId));
    return { id: workspace.id, rootDir: this.rootDir(workspace.id), limits: this.sandboxLimits, network, env, mounts: pkgs.mounts };
  }

  protected async startSandbox(workspace: WorkspaceRow): Promise<SandboxHandle> {
    await this.ensureDisk(workspace.id);
    const network = await this.startWorkspaceProxy(workspace.id, workspace.networkProfile);
    const spec = await this.specFor(workspace, network);
    const recovered = await this.deps.executor.recover(spec);
    const h = recovered ?? (await this.deps.executor.create(spec));
    this.handles.set(workspace.id, h);
    this.update(workspace.id, { sandbox_json: JSON.stringify(h) });
    return h;
  }

  /** Starts the sandbox of a workspace by id (its own network profile and entries: specFor). */
  startWorkspaceSandbox(id: string): Promise<SandboxHandle> {
    return this.startSandbox(this.get(id));
  }

  /** A template build's setup sandbox on `id`'s disk: the workspace user, dependency-access, the entries given (setup-only included), no managed packages. */
  async startSetupSandbox(id: string, env: Record<string, string>): Promise<SandboxHandle> {
    return this.deps.executor.create({ id, rootDir: this.rootDir(id), limits: this.sandboxLimits, network: await this.startWorkspaceProxy(id, 'dependency-access'), env, mounts: [] });
  }

  /** Stops a sandbox a template step started (every process ends; none given: none started) and the egress proxy of its id. */
  async stopStartedSandbox(id: string, handle: SandboxHandle | undefined): Promise<void> {
    if (handle) await this.deps.executor.destroy(handle);
    await this.egress.stop(id);
  }

  /** A template build a stop interrupted (templates/builds.ts recover): its sandbox, which outlives a runner, stopped and its files removed. */
  async discardBuild(id: string): Promise<void> {
    await this.deps.executor.destroy(this.handleById(id)).catch((e) => this.deps.log.warn({ err: e, template: id }, 'stopping the sandbox of an interrupted template build failed'));
    await this.removeFiles(id);
  }

  /** The workspace's sandbox is the spare started for it; one that failed to start or died is replaced by a fresh start. */
  protected async adoptSpare(id: string, ready: Promise<SandboxHandle | undefined>): Promise<SandboxHandle> {
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

  /** The handle of a workspace's running sandbox, if any: no lease moved, nothing started (the dashboard's status views). */
  liveHandle(id: string): SandboxHandle | undefined {
    return this.handles.get(id);
  }

  protected async stopSandbox(id: string): Promise<void> {
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

  protected storedHandle(id: string): SandboxHandle | null {
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
  protected runGit(id: string, command: string, opts: EphemeralGitOptions): Promise<ExecResult> {
    return runEphemeralGit(
      { executor: this.deps.executor, egress: this.egress, repoCredentials: this.deps.repoCredentials, repos: this.deps.repos, runDir: join(this.deps.config.dataDir, 'run'), ...this.ids },
      { id, repoDir: join(this.rootDir(id), 'repo'), limits: this.sandboxLimits },
      command,
      opts,
    );
  }

  describe(workspace: WorkspaceRow) {
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

  protected readonly listStatements: { first?: Statement; after?: Statement } = {};

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
  protected restartSandbox(id: string, why: string): Promise<SandboxHandle> {
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
  protected async sandboxState(id: string): Promise<'running' | 'died' | 'stopped'> {
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
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type WorkspaceSandboxesDescribeResult = Awaited<ReturnType<WorkspaceSandboxes['describe']>>;
