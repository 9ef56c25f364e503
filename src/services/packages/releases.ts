/**
 * Releases and bindings of managed packages (docs/packages.md): where the runner keeps release
 * images and mounts them, the guards every package tool passes, bindings and their releases as
 * the tools describe them, and what a workspace or the toolbox mounts. The base of the package
 * service: apply.ts builds releases on it, packages.ts (PackageService) adds plans and the tools.
 */
import { chmod, mkdir, rename } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { EphemeralBind } from '../../sandbox/executor.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';
import { sha256Hex } from '../../core/crypto.js';
import { runtimePython } from './pip.js';
import { copyTreeNoFollow, TreeRefusal } from './tree.js';
import { ImageProblem, makeReleaseImage, mountReleaseImage, unmountRelease, type ReleaseImage } from './image.js';
import { isMountPoint, removeTreeNoFollow } from '../../sandbox/host-fs.js';

import { type Ecosystem, ApplyState, BindingRow, Deps, PlanRow, ReleaseFile, ReleaseRow, lstatOrNull, releaseImage, releaseTarget, removeBuildDir, toolkitMatches } from './records.js';

export class PackageReleases {
  protected readonly root: string;
  protected readonly running = new Map<string, Promise<void>>();
  protected readonly resolving = new Map<string, Promise<void>>();
  protected readonly waiters = new Set<() => void>();
  protected executorImageCache: string | undefined;
  /** Release images mounted by this runner (digest -> the mount, settled once mounted; a failed one is forgotten). */
  protected readonly mounted = new Map<string, Promise<void>>();
  /** Release directories from before images being converted (digest -> the conversion). */
  protected readonly converting = new Map<string, Promise<ReleaseImage>>();
  /** Why a release could not be mounted, as this runner last found (digest -> the reason, for packages_list and packages_status). */
  protected readonly damaged = new Map<string, string>();

  constructor(protected readonly deps: Deps) {
    // Traversable (not listable) by sandbox uids: builders bind their build directory, sandboxes
    // the mounts of release images (mounts/<digest>). The images themselves (releases/) are root's alone.
    this.root = join(deps.config.dataDir, 'packages');
  }

  protected async dirs(): Promise<void> {
    await mkdir(this.root, { recursive: true, mode: 0o711 });
    await chmod(this.root, 0o711);
    for (const d of ['build', 'mounts']) await mkdir(join(this.root, d), { recursive: true, mode: 0o711 });
    for (const d of ['releases', 'cache']) {
      await mkdir(join(this.root, d), { recursive: true, mode: 0o700 });
      await chmod(join(this.root, d), 0o700);
    }
  }

  /** The release's image (root's, 0400) and where this runner mounts it for sandboxes to bind. */
  protected imagePath(digest: string): string {
    return join(this.root, 'releases', `${digest}.sqfs`);
  }
  protected mountPoint(digest: string): string {
    return join(this.root, 'mounts', digest);
  }
  /** Where a runner before release images kept the release: a directory (converted on first need, or at start). */
  protected legacyPath(digest: string): string {
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

  protected caPem(): string | undefined {
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

  /** A plan that can never be applied any more: approval denied or expired, or its apply failed. */
  protected spent(plan: PlanRow): boolean {
    const apply = this.deps.db.prepare('SELECT state FROM package_applies WHERE plan_id = ?').pluck().get(plan.id) as ApplyState | undefined;
    if (apply) return apply === 'FAILED';
    if (plan.approval !== 'required' || !plan.approval_id) return false;
    const st = this.deps.approvals.get(plan.approval_id).state;
    return st === 'denied' || st === 'expired';
  }

  protected planRow(id: string): PlanRow {
    const r = this.deps.db.prepare('SELECT * FROM package_plans WHERE id = ?').get(id) as PlanRow | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `planId: no package plan ${id}`, { field: 'planId' });
    return r;
  }

  protected bind(plan: PlanRow, releaseId: string): BindingRow {
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

  protected bindingRow(id: string): BindingRow {
    const r = this.deps.db.prepare('SELECT * FROM package_bindings WHERE id = ?').get(id) as BindingRow | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `bindingId: no package binding ${id}`, { field: 'bindingId' });
    return r;
  }

  protected async describeRelease(release: ReleaseRow) {
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
  protected presence(release: ReleaseRow): { present: boolean; problem?: string } {
    const problem = this.releaseProblem(release);
    return problem === null ? { present: true } : { present: false, problem };
  }

  /**
   * Why the release cannot be mounted, as far as is known without hashing its image (a mount hashes
   * it; what a mount of this runner found is remembered): null when its image is in place, or its
   * directory from before release images is (converted when first needed, and at start).
   */
  protected releaseProblem(release: ReleaseRow): string | null {
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
  protected hasLegacyEntry(digest: string): boolean {
    return lstatOrNull(this.legacyPath(digest)) !== null;
  }

  protected setReleaseImage(release: ReleaseRow, image: ReleaseImage): void {
    const manifest = { ...(JSON.parse(release.manifest_json) as Record<string, unknown>), image };
    this.deps.db.prepare('UPDATE package_releases SET manifest_json = ? WHERE id = ?').run(JSON.stringify(manifest), release.id);
    release.manifest_json = JSON.stringify(manifest);
  }

  // ---------- status ----------

  protected notify(): void {
    for (const w of [...this.waiters]) w();
  }

  protected async waitChange(ms: number, done: () => boolean): Promise<void> {
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
  protected effectiveBindings(workspaceId: string | null): Array<{ ecosystem: Ecosystem; name: string; release_id: string }> {
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

  protected recordedMounts(ws: string): Array<{ ecosystem: Ecosystem; name: string; release_id: string }> | null {
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
  protected async mountedRelease(release: ReleaseRow, workspaceId: string | null): Promise<string | null> {
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
  protected async mountRelease(release: ReleaseRow, mountPoint: string): Promise<void> {
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
  protected convert(release: ReleaseRow): Promise<ReleaseImage> {
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
  protected async convertLegacy(release: ReleaseRow): Promise<ReleaseImage> {
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
}
