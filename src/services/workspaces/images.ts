/**
 * A workspace's disk image as checkpoints and forks use it (docs/checkpoints.md): whether this
 * executor keeps images, a frozen consistent view of the image, replacing it, and a new workspace
 * opened from a copy (a fork). On sandboxes.ts; recovery.ts and lifecycle.ts build on it.
 */
import { rename, rm } from 'node:fs/promises';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { ForkTemplate, NetworkProfile, WorkspaceRow, rowOf } from './records.js';
import { WorkspaceSandboxes } from './sandboxes.js';
import { detach as detachTemplateDisk } from './templates/store.js';

export class WorkspaceImages extends WorkspaceSandboxes {
  // ---------- checkpoints and forks (issue #33: src/services/checkpoints.ts calls these) ----------

  /** Checkpoints and forks copy a workspace's filesystem image: refused when workspaces have none (sandboxDiskMb 0). */
  protected requireImages(field: string): void {
    if (!this.deps.executor.storage?.image || !this.deps.executor.storage.copies)
      throw new ServiceError('NOT_SUPPORTED', `${field}: checkpoints and forks copy a workspace's filesystem image on this host, which this executor does not keep (under --executor kubernetes a workspace's files are on its claim in the cluster; docs/scaling.md)`, { field, executor: this.deps.config.executor });
    if (this.deps.config.sandboxDiskMb <= 0)
      throw new ServiceError('FAILED_PRECONDITION', `${field}: checkpoints and forks need each workspace on its own filesystem (--sandbox-disk-mb above 0; it is ${this.deps.config.sandboxDiskMb} here)`, { field, setting: 'sandboxDiskMb' });
  }

  /** The host file of a workspace's filesystem (the driver's storage keeps it; requireImages checked it can). */
  imageOf(id: string): string {
    const img = this.deps.executor.storage?.image?.(id);
    if (!img) throw new ServiceError('FAILED_PRECONDITION', 'checkpoints and forks need each workspace on its own filesystem (--sandbox-disk-mb above 0)', { setting: 'sandboxDiskMb' });
    return img;
  }

  /** A template build's filesystem made ready to save: free blocks discarded, unmounted (templates/store.ts detach); the image stays, its path returned. */
  async detachDisk(id: string): Promise<string> {
    await detachTemplateDisk(this.rootDir(id));
    return this.imageOf(id);
  }

  /** A workspace that can be checkpointed, restored or forked: not closed, not opening. */
  protected usable(id: string, field: string): WorkspaceRow {
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
}
