/**
 * Backups of the instance (issue #35 item 2, docs/operations.md): `atelier backup DEST` and the
 * schedule (--backup-dir, --backup-interval-minutes, --backup-keep) both run here. The copy itself
 * is src/store/backup.ts, in a worker thread with its own database connection (VACUUM INTO and the
 * file copies are synchronous: never on the service's event loop). Every backup, successful or not,
 * is a row of `backups` (this service owns the table) and an audit entry.
 */
import { Worker } from 'node:worker_threads';
import { lstatSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { DB } from '../../store/db.js';
import type { BackupManifest } from '../../store/backup.js';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import type { AuditLog } from './audit.js';
import { VERSION } from '../../core/version.js';

export interface BackupRecord {
  id: string;
  kind: 'manual' | 'scheduled';
  dest: string;
  startedAt: string;
  finishedAt: string;
  outcome: 'ok' | 'failed';
  bytes: number;
  files: number;
  schemaVersion: number | null;
  masterKeyIncluded: boolean;
  error: string | null;
}

/** Names of scheduled backup directories (UTC time, sortable); retention removes only these. */
export const SCHEDULED_NAME = /^atelier-backup-\d{8}T\d{6}Z$/;

const row = (r: Record<string, unknown>): BackupRecord => ({
  id: r.id as string,
  kind: r.kind as BackupRecord['kind'],
  dest: r.dest as string,
  startedAt: r.started_at as string,
  finishedAt: r.finished_at as string,
  outcome: r.outcome as BackupRecord['outcome'],
  bytes: r.bytes as number,
  files: r.files as number,
  schemaVersion: (r.schema_version as number | null) ?? null,
  masterKeyIncluded: r.master_key_included === 1,
  error: (r.error as string | null) ?? null,
});

export class BackupService {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private stopped = false;

  constructor(private readonly deps: { db: DB; config: Config; log: Logger; audit: AuditLog; masterKey: Buffer }) {}

  /** Takes one backup into dest (new or empty directory) and records it. */
  async run(o: { dest: string; kind: 'manual' | 'scheduled'; includeMasterKey?: boolean }): Promise<{ record: BackupRecord; manifest: BackupManifest }> {
    if (this.running) throw new ServiceError('FAILED_PRECONDITION', 'a backup is already running in this process; try again when it has finished', {});
    const p = this.runOnce(o);
    this.running = p.catch(() => undefined);
    try {
      return await p;
    } finally {
      this.running = undefined;
    }
  }

  private async runOnce(o: { dest: string; kind: 'manual' | 'scheduled'; includeMasterKey?: boolean }): Promise<{ record: BackupRecord; manifest: BackupManifest }> {
    const startedAt = new Date().toISOString();
    const id = newId('backup');
    const includeMasterKey = o.includeMasterKey === true;
    const result = await new Promise<{ manifest?: BackupManifest; error?: string; expected?: boolean }>((resolve) => {
      const w = new Worker(new URL('../../store/backup-worker.js', import.meta.url), {
        workerData: { dataDir: this.deps.config.dataDir, dest: o.dest, masterKey: new Uint8Array(this.deps.masterKey), includeMasterKey, atelierVersion: VERSION },
      });
      let done = false;
      w.once('message', (m) => {
        done = true;
        resolve(m as { manifest?: BackupManifest; error?: string });
      });
      w.once('error', (e: Error) => {
        if (!done) resolve({ error: e.message });
        done = true;
      });
      w.once('exit', (code) => {
        if (!done) resolve({ error: `the backup thread ended (exit ${code})` });
        done = true;
      });
    });
    const finishedAt = new Date().toISOString();
    const m = result.manifest;
    this.deps.db
      .prepare('INSERT INTO backups (id, kind, dest, started_at, finished_at, outcome, bytes, files, schema_version, master_key_included, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)')
      .run(id, o.kind, o.dest, startedAt, finishedAt, m ? 'ok' : 'failed', m?.totalBytes ?? 0, m?.files.length ?? 0, m?.schemaVersion ?? null, m && includeMasterKey ? 1 : 0, result.error ?? null);
    this.deps.audit.record({
      actor: o.kind === 'manual' ? 'cli' : 'system',
      action: 'backup',
      target: o.dest,
      outcome: m ? 'ok' : 'failed',
      reason: result.error ?? null,
      details: { id, kind: o.kind, bytes: m?.totalBytes ?? 0, files: m?.files.length ?? 0, masterKeyIncluded: includeMasterKey },
    });
    if (!m) {
      if (!result.expected) this.deps.log.error({ err: result.error, dest: o.dest }, 'backup failed');
      throw new ServiceError('FAILED_PRECONDITION', `backup to ${o.dest} failed: ${result.error}`, { dest: o.dest, backupId: id });
    }
    return { record: this.get(id)!, manifest: m };
  }

  get(id: string): BackupRecord | undefined {
    const r = this.deps.db.prepare('SELECT * FROM backups WHERE id = ?').get(id) as Record<string, unknown> | undefined;
    return r ? row(r) : undefined;
  }

  /** The last successful backup, and the last failure if one came after it (for the dashboard and /metrics). */
  summary(): { last: BackupRecord | null; lastFailure: BackupRecord | null; schedule: { dir: string; intervalMinutes: number; keep: number } | null } {
    const last = this.deps.db.prepare("SELECT * FROM backups WHERE outcome = 'ok' ORDER BY finished_at DESC LIMIT 1").get() as Record<string, unknown> | undefined;
    const fail = this.deps.db.prepare("SELECT * FROM backups WHERE outcome = 'failed' AND finished_at > ? ORDER BY finished_at DESC LIMIT 1").get(last?.finished_at ?? '') as Record<string, unknown> | undefined;
    const c = this.deps.config;
    return { last: last ? row(last) : null, lastFailure: fail ? row(fail) : null, schedule: c.backupDir ? { dir: c.backupDir, intervalMinutes: c.backupIntervalMinutes, keep: c.backupKeep } : null };
  }

  /** Starts the schedule when --backup-dir is set: the first backup is due an interval after the last scheduled one (at once if none). */
  start(): void {
    if (!this.deps.config.backupDir) return;
    const last = this.deps.db.prepare("SELECT max(finished_at) FROM backups WHERE kind = 'scheduled' AND outcome = 'ok'").pluck().get() as string | null;
    const every = this.deps.config.backupIntervalMinutes * 60_000;
    const due = last ? Date.parse(last) + every : Date.now();
    this.schedule(Math.max(0, due - Date.now()));
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.scheduled(), Math.min(ms, 2 ** 31 - 1));
    this.timer.unref();
  }

  private async scheduled(): Promise<void> {
    const dir = this.deps.config.backupDir;
    const dest = join(dir, `atelier-backup-${new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z')}`);
    try {
      const { record } = await this.run({ dest, kind: 'scheduled' });
      this.deps.log.info({ dest, bytes: record.bytes }, 'scheduled backup taken');
      this.prune();
    } catch (e) {
      this.deps.log.error({ err: (e as Error).message, dest }, 'scheduled backup failed');
    }
    this.schedule(this.deps.config.backupIntervalMinutes * 60_000);
  }

  /** Keeps the newest --backup-keep scheduled backups in --backup-dir (directories of that name holding a manifest; nothing else is touched). */
  prune(): string[] {
    const dir = this.deps.config.backupDir;
    const names = readdirSync(dir)
      .filter((n) => SCHEDULED_NAME.test(n))
      .filter((n) => {
        try {
          return lstatSync(join(dir, n)).isDirectory() && lstatSync(join(dir, n, 'manifest.json')).isFile();
        } catch {
          return false;
        }
      })
      .sort();
    const gone = names.slice(0, Math.max(0, names.length - this.deps.config.backupKeep));
    for (const n of gone) {
      rmSync(join(dir, n), { recursive: true, force: true });
      this.deps.log.info({ backup: join(dir, n) }, 'old scheduled backup removed (--backup-keep)');
    }
    return gone;
  }

  /**
   * Right after a restore (before anything serves it): workspaces the backup saw open have no files
   * here (a backup never holds them), so they are closed with that reason; their records stay. The
   * one write this service makes to a table services/workspaces owns, done before that service runs.
   */
  afterRestore(): number {
    return this.deps.db
      .prepare("UPDATE workspaces SET state = 'closed', state_reason = 'restored from a backup, which holds no workspace files', closed_at = ? WHERE state != 'closed'")
      .run(new Date().toISOString()).changes;
  }

  /** Stops the schedule and waits for a backup in flight (the service's shutdown). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }
}
