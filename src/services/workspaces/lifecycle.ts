/**
 * Workspaces: lifecycle and leases on the executor. Owns table: workspaces. WorkspaceService is
 * this module's class on three others, each read alone: recovery.ts (workspace_recover) on
 * images.ts (disk images: checkpoints' and forks' copies) on sandboxes.ts (rows, disks, sandboxes
 * and their spares, exec); records.ts has the row types. Here: open (from a clone or a template,
 * templates/), the views, renew, close, expiry, start and shutdown.
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
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso, settlesWithin } from '../../core/clock.js';
import type { SandboxHandle } from '../../sandbox/executor.js';
import { describeDeath, sandboxKind } from '../../sandbox/executor.js';
import type { ClientProfile, OverviewSection } from '../../sandbox/daemon/protocol.js';
import type { ParsedRepoUrl } from '../repos/index.js';
import { parseRepoUrl } from '../repos/index.js';
import { gitConfigEnv } from '../git/index.js';
import { gitFailure, runEphemeralGit } from '../git/index.js';
import { openFromTemplate, type TemplateOpen, type TemplateWorkspaceSteps } from './templates/open.js';
import type { CloneRequest } from './templates/builds.js';
import { GIT_BIN, NetworkProfile, OpenArgs, SHA_RE, SHUTDOWN_LOCK_WAIT_MS, rowOf } from './records.js';
import { WorkspaceRecovery } from './recovery.js';

export type { ForkTemplate, NetworkProfile, OpenArgs, WorkspaceRow, WorkspaceState } from './records.js';

/** What a clone is asked for: workspace_open's arguments, or a template's clone request (null: not given). */
type CloneArgs = Pick<OpenArgs, 'ref' | 'fetchDepth' | 'shallowSince'> | CloneRequest;

/**
 * The workspace service. The template code (templates/) is handed this service itself, typed as
 * the steps it needs (TemplateWorkspaceSteps: disks, clone, sandboxes), not closures lent.
 */
export class WorkspaceService extends WorkspaceRecovery implements TemplateWorkspaceSteps {
  // ---------- lifecycle ----------

  async open(openArgs: OpenArgs, principal: string, progress: (p: number, t?: number, m?: string) => void, signal: AbortSignal) {
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
          template = await openFromTemplate({ templates: this.deps.templates!, workspaces: this, executor: this.deps.executor, repo }, id, plan, progress, signal);
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

  /**
   * The commit a ref names on the repository now (git ls-remote in a short-lived sandbox with the
   * repository host's network and credential, in an empty root-owned directory). A full commit id
   * is its own answer; a short one gives null (reading it needs a fetch).
   */
  async remoteOid(id: string, repo: ParsedRepoUrl, ref: string | null | undefined, signal: AbortSignal): Promise<string | null> {
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

  /** Clones into the workspace's filesystem (`id`: a workspace's or a template build's); returns the checked-out commit and branch (null when detached), read by the same script. */
  async clone(id: string, repo: ParsedRepoUrl, openArgs: CloneArgs, signal: AbortSignal): Promise<{ head: string | null; branch: string | null }> {
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

  list(cursor: string | undefined, limit: number) {
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

  async status(id: string) {
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
  private sandboxPlacement(id: string) {
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
  capabilities(id: string) {
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
  ) {
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

  secretsList(workspaceId: string | undefined, args: { environmentId?: string; query?: string; cursor?: string; limit: number }) {
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

  setActive(principal: string, id: string) {
    const w = this.get(id);
    if (w.state === 'closed') throw new ServiceError('FAILED_PRECONDITION', `workspaceId: workspace ${id} is closed`, { field: 'workspaceId' });
    this.deps.principals.setActiveWorkspace(principal, id);
    return { activeWorkspaceId: id, state: w.state };
  }

  async close(id: string) {
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
      ?.recover(this)
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

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type WorkspaceOpenResult = Awaited<ReturnType<WorkspaceService['open']>>;
export type WorkspaceListResult = Awaited<ReturnType<WorkspaceService['list']>>;
export type WorkspaceStatusResult = Awaited<ReturnType<WorkspaceService['status']>>;
export type WorkspaceCapabilitiesResult = Awaited<ReturnType<WorkspaceService['capabilities']>>;
export type WorkspaceContextResult = Awaited<ReturnType<WorkspaceService['context']>>;
export type WorkspaceSecretsListResult = Awaited<ReturnType<WorkspaceService['secretsList']>>;
export type WorkspaceSetActiveResult = Awaited<ReturnType<WorkspaceService['setActive']>>;
export type WorkspaceCloseResult = Awaited<ReturnType<WorkspaceService['close']>>;
