/**
 * Workspace checkpoints and forks (issue #33 items 1 and 2; docs/checkpoints.md). Owns table:
 * checkpoints; files: <dataDir>/checkpoints/<id>.img (root's, the directory 0700).
 *
 * A checkpoint is a consistent copy of a workspace's whole filesystem image (checkout with
 * uncommitted and untracked files, .git, home, tmp): taken under the workspace's lifecycle lock,
 * its processes frozen (cgroup freezer) and its filesystem frozen (fsfreeze) for the copy
 * (src/sandbox/snapshot.ts). Restore copies it back over the workspace's image after stopping its
 * processes; a fork is a new workspace on a copy of a checkpoint or of a live workspace. Retention
 * like artifacts (60 s to 30 days, swept), a quota per owner of bytes on the host disk and of
 * count. Beyond the spec: toolset "checkpoints".
 */
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { DB } from '../store/db.js';
import type { CursorCodec } from '../core/cursor.js';
import type { Logger } from '../core/log.js';
import { ServiceError } from '../core/errors.js';
import { newId } from '../core/ids.js';
import { startSweeper, type Sweeper } from '../core/sweeper.js';
import { IMAGE_STORE_FULL, type CopyMode, type WorkspaceImageCopies } from '../sandbox/executor.js';
import type { AuditLog } from './instance/index.js';
import type { RetentionClock } from './memories.js';
import type { ForkTemplate, NetworkProfile, WorkspaceService } from './workspaces/index.js';

export interface CheckpointServiceDeps {
  db: DB;
  cursors: CursorCodec;
  log: Logger;
  audit: AuditLog;
  workspaces: WorkspaceService;
  clock: RetentionClock;
  /** <dataDir>/checkpoints */
  root: string;
  /** Bytes of host disk all of an owner's checkpoints may take. */
  quotaBytes: number;
  /** Checkpoints an owner may keep. */
  maxCount: number;
  /** Where the images are (the XFS pool with reflinks, or the data directory): named in errors when it is full. */
  pool?: { readonly state: string; readonly file?: string; readonly mountPoint?: string };
  /** The executor's image copies (Executor.storage.copies); absent, no workspace has an image to copy. */
  copies?: WorkspaceImageCopies;
}

interface CheckpointRow {
  seq: number;
  id: string;
  owner_id: string;
  workspace_id: string;
  label: string;
  source_json: string;
  size_bytes: number;
  disk_bytes: number;
  copy_mode: CopyMode;
  processes_frozen: number;
  frozen_ms: number;
  retention_seconds: number;
  expires_at_ms: number;
  created_at: string;
}

/** Default retention: 7 days (artifacts keep 30; a checkpoint is a whole filesystem). */
export const DEFAULT_CHECKPOINT_RETENTION = 604_800;

/** Counters for /metrics. */
export interface CheckpointMetrics {
  /** Copies made, by what made them (checkpoint, restore, fork_checkpoint, fork_live) and how (reflink, copy). */
  copies: Map<string, number>;
  /** Bytes the copies took on the host disk, by the same labels. */
  diskBytes: Map<string, number>;
  /** Milliseconds workspaces stood frozen for checkpoints (sum) and how many. */
  frozenMsSum: number;
  frozenCount: number;
  refused: Map<string, number>;
}

export class CheckpointService {
  private sweeper: Sweeper | undefined;
  /** Checkpoints being taken, per owner: counted against the quota until their rows exist. */
  private readonly reserved = new Map<string, { n: number; b: number }>();
  readonly metrics: CheckpointMetrics = { copies: new Map(), diskBytes: new Map(), frozenMsSum: 0, frozenCount: 0, refused: new Map() };

  constructor(private readonly deps: CheckpointServiceDeps) {
    mkdirSync(deps.root, { recursive: true, mode: 0o700 });
  }

  private image(id: string): string {
    return join(this.deps.root, `${id}.img`);
  }

  private count(op: string, mode: CopyMode, diskBytes: number): void {
    const k = `${op}|${mode}`;
    this.metrics.copies.set(k, (this.metrics.copies.get(k) ?? 0) + 1);
    this.metrics.diskBytes.set(k, (this.metrics.diskBytes.get(k) ?? 0) + diskBytes);
  }

  private refuse(reason: string, error: ServiceError): ServiceError {
    this.metrics.refused.set(reason, (this.metrics.refused.get(reason) ?? 0) + 1);
    return error;
  }

  /** A copy that found the images' filesystem full: said with the pool's file and setting (RESOURCE_EXHAUSTED). */
  private full<T>(op: string, copying: Promise<T>): Promise<T> {
    return copying.catch((e: unknown) => {
      if (!(e instanceof ServiceError) || e.details?.rule !== IMAGE_STORE_FULL) throw e;
      const pool = this.deps.pool;
      const where = pool?.state === 'xfs'
        ? `the image pool ${pool.file} (mounted at ${pool.mountPoint}; its size is set when it is made, --image-pool-size-mb) is full`
        : `the data directory's filesystem (${e.details.directory as string}) is full`;
      throw this.refuse('image_store', new ServiceError('RESOURCE_EXHAUSTED', `${op}: ${where}; delete checkpoints, forks or templates, or close workspaces, to make room`, { field: op === 'checkpoint_restore' ? 'checkpointId' : 'workspaceId', rule: IMAGE_STORE_FULL, pool: pool?.state === 'xfs' ? pool.file : null }, false));
    });
  }

  private describe(row: CheckpointRow) {
    const c = row;
    const src = JSON.parse(c.source_json) as ForkTemplate;
    return {
      checkpointId: c.id,
      workspaceId: c.workspace_id,
      label: c.label,
      repositoryUrl: src.repositoryUrl,
      branch: src.branch,
      headOid: src.headOid,
      sizeBytes: c.size_bytes,
      diskBytes: c.disk_bytes,
      copyMode: c.copy_mode,
      processesFrozen: c.processes_frozen === 1,
      frozenMs: c.frozen_ms,
      retentionSeconds: c.retention_seconds,
      expiresAt: new Date(c.expires_at_ms).toISOString(),
      createdAt: c.created_at,
    };
  }

  private get(owner: string, id: string, field = 'checkpointId'): CheckpointRow {
    const r = this.deps.db.prepare('SELECT * FROM checkpoints WHERE id = ? AND owner_id = ?').get(id, owner) as CheckpointRow | undefined;
    if (!r || r.expires_at_ms <= Date.now()) throw new ServiceError('NOT_FOUND', `${field}: no checkpoint ${id}${r ? ' (its retention ended)' : ''}`, { field });
    return r;
  }

  /** Checkpoints kept and bytes they take (with those being taken right now). */
  usage(owner: string): { count: number; diskBytes: number } {
    const r = this.deps.db.prepare('SELECT count(*) AS n, coalesce(sum(disk_bytes), 0) AS b FROM checkpoints WHERE owner_id = ? AND expires_at_ms > ?').get(owner, Date.now()) as { n: number; b: number };
    const pending = this.reserved.get(owner);
    return { count: r.n + (pending?.n ?? 0), diskBytes: r.b + (pending?.b ?? 0) };
  }

  /** Refuses a new checkpoint the quota cannot hold; `need` is what the source's image takes on disk now (the copy takes as much). */
  private checkQuota(owner: string, need: number): void {
    const u = this.usage(owner);
    if (u.count >= this.deps.maxCount)
      throw this.refuse('count', new ServiceError('RESOURCE_EXHAUSTED', `checkpoint_create: you keep ${u.count} checkpoints, the most allowed (--checkpoint-max-count ${this.deps.maxCount}); delete some with checkpoint_delete or let their retention end`, { field: 'workspaceId', rule: 'checkpoint count quota', count: u.count, maxCount: this.deps.maxCount }, false));
    if (u.diskBytes + need > this.deps.quotaBytes)
      throw this.refuse('bytes', new ServiceError('RESOURCE_EXHAUSTED', `checkpoint_create: your checkpoints take ${u.diskBytes} of ${this.deps.quotaBytes} bytes (--checkpoint-quota-mb) and this workspace's filesystem needs ${need} more; delete checkpoints with checkpoint_delete or let their retention end`, { field: 'workspaceId', rule: 'checkpoint disk quota', usedBytes: u.diskBytes, needBytes: need, quotaBytes: this.deps.quotaBytes }, false));
  }

  async create(owner: string, workspaceId: string, args: { label?: string; retentionSeconds?: number }) {
    const id = newId('checkpoint');
    const dest = this.image(id);
    const retention = args.retentionSeconds ?? DEFAULT_CHECKPOINT_RETENTION;
    let reservedBytes: number | undefined;
    const release = () => {
      if (reservedBytes === undefined) return;
      const r = this.reserved.get(owner)!;
      if (r.n <= 1) this.reserved.delete(owner);
      else this.reserved.set(owner, { n: r.n - 1, b: r.b - reservedBytes });
      reservedBytes = undefined;
    };
    try {
      const r = await this.full('checkpoint_create', this.deps.workspaces.withDiskImage(workspaceId, 'workspaceId', async (w, disk) => {
        const copies = this.copies();
        await copies.settle(disk.rootDir);
        const { diskBytes } = await copies.usage(disk.image);
        this.checkQuota(owner, diskBytes);
        // Reserved until the row exists, so two checkpoints taken at once cannot both pass the quota.
        this.reserved.set(owner, { n: (this.reserved.get(owner)?.n ?? 0) + 1, b: (this.reserved.get(owner)?.b ?? 0) + diskBytes });
        reservedBytes = diskBytes;
        const snap = await copies.snapshot(disk, dest);
        // Commands kept writing until the freeze: the copy may be larger than the measure. Still over: refused, nothing kept.
        const others = this.usage(owner).diskBytes - diskBytes;
        if (others + snap.diskBytes > this.deps.quotaBytes) {
          await rm(dest, { force: true });
          throw this.refuse('bytes', new ServiceError('RESOURCE_EXHAUSTED', `checkpoint_create: your checkpoints take ${others} of ${this.deps.quotaBytes} bytes (--checkpoint-quota-mb) and this workspace's filesystem took ${snap.diskBytes} more as it was copied; delete checkpoints with checkpoint_delete or let their retention end`, { field: 'workspaceId', rule: 'checkpoint disk quota', usedBytes: others, needBytes: snap.diskBytes, quotaBytes: this.deps.quotaBytes }, false));
        }
        return { w, snap };
      }));
      const now = Date.now();
      const row: Omit<CheckpointRow, 'seq'> = {
        id,
        owner_id: owner,
        workspace_id: workspaceId,
        label: args.label ?? '',
        source_json: JSON.stringify(this.deps.workspaces.forkTemplate(workspaceId)),
        size_bytes: r.snap.sizeBytes,
        disk_bytes: r.snap.diskBytes,
        copy_mode: r.snap.mode,
        processes_frozen: r.snap.processesFrozen ? 1 : 0,
        frozen_ms: r.snap.frozenMs,
        retention_seconds: retention,
        expires_at_ms: now + retention * this.deps.clock.secondMs,
        created_at: new Date(now).toISOString(),
      };
      this.deps.db
        .prepare(
          `INSERT INTO checkpoints (id, owner_id, workspace_id, label, source_json, size_bytes, disk_bytes, copy_mode, processes_frozen, frozen_ms, retention_seconds, expires_at_ms, created_at)
           VALUES (@id, @owner_id, @workspace_id, @label, @source_json, @size_bytes, @disk_bytes, @copy_mode, @processes_frozen, @frozen_ms, @retention_seconds, @expires_at_ms, @created_at)`,
        )
        .run(row);
      release(); // the row counts now
      this.count('checkpoint', r.snap.mode, r.snap.addedBytes);
      this.metrics.frozenMsSum += r.snap.frozenMs;
      this.metrics.frozenCount += 1;
      this.deps.audit.record({ actor: 'mcp', action: 'checkpoint_create', target: id, outcome: 'ok', details: { workspaceId, diskBytes: r.snap.diskBytes, copyMode: r.snap.mode } });
      return { ...this.describe(this.get(owner, id)), addedBytes: r.snap.addedBytes, ms: r.snap.ms, quota: this.quota(owner) };
    } catch (e) {
      await rm(dest, { force: true });
      throw e;
    } finally {
      release();
    }
  }

  private quota(owner: string): Record<string, number> {
    const u = this.usage(owner);
    return { usedBytes: u.diskBytes, quotaBytes: this.deps.quotaBytes, count: u.count, maxCount: this.deps.maxCount };
  }

  list(owner: string, args: { workspaceId?: string; cursor?: string; limit: number }) {
    const after = args.cursor ? this.deps.cursors.decode<{ s: number }>('checkpoint_list', args.cursor).s : Number.MAX_SAFE_INTEGER;
    const rows = this.deps.db
      .prepare(`SELECT * FROM checkpoints WHERE owner_id = ? AND expires_at_ms > ? AND seq < ? ${args.workspaceId ? 'AND workspace_id = ?' : ''} ORDER BY seq DESC LIMIT ?`)
      .all(owner, Date.now(), after, ...(args.workspaceId ? [args.workspaceId] : []), args.limit + 1) as CheckpointRow[];
    const page = rows.slice(0, args.limit);
    return {
      checkpoints: page.map((c) => this.describe(c)),
      nextCursor: rows.length > args.limit ? this.deps.cursors.encode('checkpoint_list', { s: page[page.length - 1]!.seq }) : null,
      quota: this.quota(owner),
    };
  }

  /** Dashboard: checkpoints and forks of one workspace. */
  forWorkspace(owner: string, workspaceId: string): { checkpoints: Record<string, unknown>[]; forks: Record<string, unknown>[]; forkedFrom: unknown } {
    const rows = this.deps.db.prepare('SELECT * FROM checkpoints WHERE owner_id = ? AND workspace_id = ? AND expires_at_ms > ? ORDER BY seq DESC LIMIT 200').all(owner, workspaceId, Date.now()) as CheckpointRow[];
    const forks = this.deps.db
      .prepare("SELECT id, state, created_at, options_json FROM workspaces WHERE json_extract(options_json, '$.forkedFrom.workspaceId') = ? ORDER BY created_at DESC LIMIT 200")
      .all(workspaceId) as Array<{ id: string; state: string; created_at: string; options_json: string }>;
    const own = this.deps.db.prepare('SELECT options_json FROM workspaces WHERE id = ?').get(workspaceId) as { options_json: string } | undefined;
    return {
      checkpoints: rows.map((c) => this.describe(c)),
      forks: forks.map((f) => ({ workspaceId: f.id, state: f.state, createdAt: f.created_at, checkpointId: (JSON.parse(f.options_json) as { forkedFrom?: { checkpointId?: string } }).forkedFrom?.checkpointId ?? null })),
      forkedFrom: own ? ((JSON.parse(own.options_json) as { forkedFrom?: unknown }).forkedFrom ?? null) : null,
    };
  }

  async restore(owner: string, workspaceId: string, args: { checkpointId: string }) {
    const c = this.get(owner, args.checkpointId);
    const src = JSON.parse(c.source_json) as ForkTemplate;
    // Only into the workspace it was taken from: a checkpoint of another workspace would hand this
    // one (and an agent confined to it) that workspace's files. Another workspace: workspace_fork.
    if (c.workspace_id !== workspaceId)
      throw new ServiceError('FAILED_PRECONDITION', `checkpointId: checkpoint ${c.id} was taken of workspace ${c.workspace_id}, not ${workspaceId}: a checkpoint is restored only into its own workspace; start a new workspace from it with workspace_fork`, { field: 'checkpointId', rule: 'same workspace' });
    const t0 = Date.now();
    let mode: CopyMode = 'copy';
    let added = 0;
    const r = await this.full('checkpoint_restore', this.deps.workspaces.replaceDiskImage(workspaceId, 'workspaceId', async (tmp) => {
      ({ mode, addedBytes: added } = await this.copies().materialize({ image: this.image(c.id) }, tmp));
    }));
    this.deps.workspaces.noteHead(workspaceId, src.branch, src.headOid);
    this.count('restore', mode, added);
    this.deps.audit.record({ actor: 'mcp', action: 'checkpoint_restore', target: c.id, outcome: 'ok', details: { workspaceId, processesStopped: r.processesStopped } });
    return {
      checkpointId: c.id,
      workspaceId,
      restored: true,
      processesStopped: r.processesStopped,
      sandboxRestarted: r.sandboxRestarted,
      note: r.processesStopped
        ? 'every process of the workspace was stopped before its files were replaced; shells, sessions and background commands are gone, start them again'
        : 'no process was running in the workspace',
      copyMode: mode,
      addedBytes: added,
      ms: Date.now() - t0,
      branch: src.branch,
      headOid: src.headOid,
    };
  }

  delete(owner: string, args: { checkpointId: string }, actor: 'mcp' | 'dashboard' = 'mcp') {
    const c = this.get(owner, args.checkpointId);
    this.deps.db.prepare('DELETE FROM checkpoints WHERE id = ?').run(c.id);
    rmSync(this.image(c.id), { force: true });
    this.deps.audit.record({ actor, action: 'checkpoint_delete', target: c.id, outcome: 'ok' });
    return { checkpointId: c.id, deleted: true, freedBytes: c.disk_bytes, quota: this.quota(owner) };
  }

  /** A new workspace from a checkpoint or from a live workspace (snapshotted now, consistently). */
  async fork(owner: string, args: { checkpointId?: string; workspaceId?: string; networkProfile?: NetworkProfile }) {
    const t0 = Date.now();
    if (args.checkpointId) {
      const c = this.get(owner, args.checkpointId);
      const src = JSON.parse(c.source_json) as ForkTemplate;
      const { workspace, filled } = await this.full('workspace_fork', this.deps.workspaces.openFork(src, args.networkProfile ?? src.networkProfile, { checkpointId: c.id, workspaceId: c.workspace_id }, (img) =>
        this.copies().materialize({ image: this.image(c.id) }, img),
      ));
      this.count('fork_checkpoint', filled.mode, filled.addedBytes);
      this.deps.audit.record({ actor: 'mcp', action: 'workspace_fork', target: workspace.workspaceId as string, outcome: 'ok', details: { checkpointId: c.id, copyMode: filled.mode } });
      return { ...workspace, forkedFrom: { checkpointId: c.id, workspaceId: c.workspace_id }, copyMode: filled.mode, addedBytes: filled.addedBytes, processesFrozen: false, frozenMs: 0, ms: Date.now() - t0 };
    }
    const sourceId = args.workspaceId!;
    const src = this.deps.workspaces.forkTemplate(sourceId);
    const { workspace, filled } = await this.full('workspace_fork', this.deps.workspaces.openFork(src, args.networkProfile ?? src.networkProfile, { workspaceId: sourceId }, (img) =>
      this.deps.workspaces.withDiskImage(sourceId, 'workspaceId', (_w, disk) => this.copies().snapshot(disk, img)),
    ));
    this.count('fork_live', filled.mode, filled.addedBytes);
    this.metrics.frozenMsSum += filled.frozenMs;
    this.metrics.frozenCount += 1;
    this.deps.audit.record({ actor: 'mcp', action: 'workspace_fork', target: workspace.workspaceId as string, outcome: 'ok', details: { workspaceId: sourceId, copyMode: filled.mode } });
    return { ...workspace, forkedFrom: { workspaceId: sourceId }, copyMode: filled.mode, addedBytes: filled.addedBytes, processesFrozen: filled.processesFrozen, frozenMs: filled.frozenMs, ms: Date.now() - t0 };
  }

  /** What /metrics shows (src/telemetry/app-metrics.ts): copies by operation and mode (reflink = copy-on-write, copy = full), their disk, freeze time, refusals, stored bytes. */
  metricValues(): {
    copies: Array<{ labels: Record<string, string>; value: number }>;
    diskBytes: Array<{ labels: Record<string, string>; value: number }>;
    frozenMs: number;
    freezes: number;
    refused: Array<{ labels: Record<string, string>; value: number }>;
    stored: number;
    storedBytes: number;
  } {
    const m = this.metrics;
    const stored = this.deps.db.prepare('SELECT count(*) AS n, coalesce(sum(disk_bytes), 0) AS b FROM checkpoints').get() as { n: number; b: number };
    const byOp = (map: Map<string, number>) =>
      [...map].map(([k, value]) => {
        const [op, mode] = k.split('|') as [string, string];
        return { labels: { op, mode }, value };
      });
    return {
      copies: byOp(m.copies),
      diskBytes: byOp(m.diskBytes),
      frozenMs: m.frozenMsSum,
      freezes: m.frozenCount,
      refused: [...m.refused].map(([limit, value]) => ({ labels: { limit }, value })),
      stored: stored.n,
      storedBytes: stored.b,
    };
  }


  /** Deletes checkpoints whose retention ended; returns how many. */
  sweep(): number {
    const gone = this.deps.db.prepare('SELECT id FROM checkpoints WHERE expires_at_ms <= ?').pluck().all(Date.now()) as string[];
    for (const id of gone) {
      this.deps.db.prepare('DELETE FROM checkpoints WHERE id = ?').run(id);
      rmSync(this.image(id), { force: true });
    }
    return gone.length;
  }

  /** The executor's image copies; workspaces.requireImages refuses first where there are none. */
  private copies(): WorkspaceImageCopies {
    if (!this.deps.copies) throw new ServiceError('NOT_SUPPORTED', "checkpoints and forks copy a workspace's filesystem image on this host, which this executor does not keep");
    return this.deps.copies;
  }

  /** At start: image files no row names (a crash mid-copy) go; a filesystem a crashed runner left frozen is thawed. */
  async start(intervalMs: number): Promise<void> {
    const known = new Set(this.deps.db.prepare('SELECT id FROM checkpoints').pluck().all() as string[]);
    for (const f of readdirSync(this.deps.root)) {
      if (!(f.endsWith('.img') && known.has(f.slice(0, -4)))) rmSync(join(this.deps.root, f), { force: true });
    }
    for (const id of this.deps.copies ? this.deps.workspaces.retainedIds() : []) {
      if (await this.deps.copies!.unfreezeLeftover(this.deps.workspaces.rootDir(id))) this.deps.log.warn({ workspace: id }, 'a workspace filesystem left frozen by an earlier runner was thawed');
    }
    this.sweeper = startSweeper(() => this.sweep(), intervalMs);
  }

  stop(): void {
    this.sweeper?.stop();
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type CheckpointCreateResult = Awaited<ReturnType<CheckpointService['create']>>;
export type CheckpointListResult = Awaited<ReturnType<CheckpointService['list']>>;
export type CheckpointRestoreResult = Awaited<ReturnType<CheckpointService['restore']>>;
export type CheckpointDeleteResult = Awaited<ReturnType<CheckpointService['delete']>>;
export type CheckpointForkResult = Awaited<ReturnType<CheckpointService['fork']>>;
