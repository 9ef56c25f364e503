/**
 * Retained artifacts (spec "Retained artifacts"): one workspace file, read through the workspace
 * daemon (so the sandbox confines the path), kept as a principal-owned snapshot outside every
 * workspace. Content is stored once per SHA-256 under <dataDir>/state/artifacts/blobs; a blob is
 * deleted when no artifact refers to it. Restore writes through the sandbox (a command running as
 * the workspace user), never as root on the host. Limits and decisions: docs/knowledge.md.
 */
import { startSweeper, type Sweeper } from '../core/sweeper.js';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, existsSync, fstatSync, mkdirSync, openSync, readSync, readdirSync, renameSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { DB } from '../store/db.js';
import { tx } from '../store/db.js';
import type { CursorCodec } from '../core/cursor.js';
import { ServiceError } from '../core/errors.js';
import { defineRawText, leaseBytes, rawText, releaseRawText } from '../core/raw-text.js';
import { newId } from '../core/ids.js';
import type { FileService } from './files.js';
import type { WorkspaceService } from './workspaces/index.js';
import type { RetentionClock } from './memories.js';

export interface ArtifactServiceDeps {
  db: DB;
  cursors: CursorCodec;
  files: FileService;
  workspaces: WorkspaceService;
  clock: RetentionClock;
  /** <dataDir>/state/artifacts */
  root: string;
  /** Largest artifact, bytes. */
  maxBytes: number;
  /** Total bytes of distinct blobs, bytes. */
  quotaBytes: number;
}

interface ArtifactRow {
  seq: number;
  id: string;
  owner_id: string;
  logical_name: string;
  sha256: string;
  size: number;
  generation: number;
  retention_seconds: number;
  expires_at_ms: number;
  source_workspace_id: string | null;
  source_path: string | null;
  created_at: string;
  updated_at: string;
}

/** Default retention when none is given: the maximum, 30 days. */
export const DEFAULT_ARTIFACT_RETENTION = 2_592_000;
/** Bytes per daemon read while snapshotting (the daemon's per-call maximum). */
const READ_CHUNK = 1_048_576;
/** Bytes per in-sandbox write while restoring. */
const WRITE_CHUNK = 4 * 1_048_576;

/** Refuses `..`, absolute paths and NUL before anything reaches the daemon. */
function checkPath(path: string, tool: string): string {
  if (path.includes('\0')) throw new ServiceError('INVALID_ARGUMENT', `${tool}: path: must not contain NUL`, { field: 'path' });
  if (path.startsWith('/')) throw new ServiceError('INVALID_ARGUMENT', `${tool}: path: must be relative to the workspace root (got an absolute path)`, { field: 'path', rule: 'relative path' });
  const segs = path.split('/').filter((s) => s !== '' && s !== '.');
  if (segs.includes('..')) throw new ServiceError('INVALID_ARGUMENT', `${tool}: path: must not contain ".." segments`, { field: 'path', rule: 'no ..' });
  if (segs.length === 0) throw new ServiceError('INVALID_ARGUMENT', `${tool}: path: must name a file, not the workspace root`, { field: 'path' });
  return segs.join('/');
}

export class ArtifactService {
  private sweeper: Sweeper | undefined;
  constructor(private readonly deps: ArtifactServiceDeps) {
    mkdirSync(join(deps.root, 'blobs'), { recursive: true, mode: 0o700 });
    mkdirSync(join(deps.root, 'tmp'), { recursive: true, mode: 0o700 });
  }

  private blobPath(sha: string): string {
    return join(this.deps.root, 'blobs', sha.slice(0, 2), sha);
  }

  private now(): number {
    return Date.now();
  }

  private describe(artifact: ArtifactRow) {
    return {
      artifactId: artifact.id,
      logicalName: artifact.logical_name,
      size: artifact.size,
      sha256: artifact.sha256,
      generation: artifact.generation,
      retentionSeconds: artifact.retention_seconds,
      expiresAt: new Date(artifact.expires_at_ms).toISOString(),
      sourceWorkspaceId: artifact.source_workspace_id,
      sourcePath: artifact.source_path,
      createdAt: artifact.created_at,
      updatedAt: artifact.updated_at,
    };
  }

  private get(owner: string, id: string, tool: string): ArtifactRow {
    const r = this.deps.db.prepare('SELECT * FROM artifacts WHERE id = ? AND owner_id = ?').get(id, owner) as ArtifactRow | undefined;
    if (!r || r.expires_at_ms <= this.now()) throw new ServiceError('NOT_FOUND', `${tool}: artifactId: no artifact ${id}${r ? ' (its retention ended)' : ''}`, { field: 'artifactId' });
    return r;
  }

  usedBytes(): number {
    return this.deps.db.prepare('SELECT coalesce(sum(size), 0) FROM artifact_blobs').pluck().get() as number;
  }

  private checkLimits(size: number, sha: string | undefined, path: string): void {
    if (size > this.deps.maxBytes) {
      throw new ServiceError('FAILED_PRECONDITION', `artifacts_snapshot: path: ${path} has ${size} bytes; an artifact may hold at most ${this.deps.maxBytes} bytes (--artifact-max-mb)`, {
        field: 'path',
        size,
        limit: this.deps.maxBytes,
      });
    }
    if (sha && this.deps.db.prepare('SELECT 1 FROM artifact_blobs WHERE sha256 = ?').get(sha)) return;
    const used = this.usedBytes();
    if (used + size > this.deps.quotaBytes) {
      throw new ServiceError(
        'RESOURCE_EXHAUSTED',
        `artifacts_snapshot: the artifact store holds ${used} of ${this.deps.quotaBytes} bytes (--artifact-quota-mb) and ${path} needs ${size} more; delete artifacts with artifacts_delete or let their retention end`,
        { field: 'path', size, usedBytes: used, quotaBytes: this.deps.quotaBytes },
        false,
      );
    }
  }

  async snapshot(
    owner: string,
    workspaceId: string,
    args: { path: string; logicalName: string; retentionSeconds?: number },
    signal: AbortSignal,
    progress: (p: number, t?: number, m?: string) => void,
  ) {
    const rel = checkPath(args.path, 'artifacts_snapshot');
    const tmp = join(this.deps.root, 'tmp', `snap-${randomBytes(8).toString('hex')}`);
    const fd = openSync(tmp, 'wx', 0o600);
    const hash = createHash('sha256');
    let size = 0;
    let sha = '';
    let written = 0;
    try {
      let cursor: string | undefined;
      for (;;) {
        const result = (await this.deps.files.read(workspaceId, { path: rel, offset: 0, limit: READ_CHUNK, cursor }, signal)) as {
          realPath: string;
          size: number;
          sha256: string;
          encoding: string;
          content: string;
          eof: boolean;
          nextCursor: string | null;
        };
        if (cursor === undefined) {
          // A symlink anywhere on the path resolves elsewhere: refused, so the name kept is the file read.
          if (result.realPath !== rel) {
            throw new ServiceError('INVALID_ARGUMENT', `artifacts_snapshot: path: ${rel} is or passes through a symbolic link (it resolves to ${result.realPath}); snapshot the file by its real path`, {
              field: 'path',
              rule: 'no symlinks',
              realPath: result.realPath,
            });
          }
          size = result.size;
          sha = result.sha256;
          this.checkLimits(size, sha, rel);
        }
        // The file's bytes as the daemon sent them (core/raw-text.ts), not decoded into a string and
        // encoded back; a content that was read as a string already is encoded from it as before.
        const raw = rawText(result, 'content');
        const buf = raw ? raw.bytes : Buffer.from(result.content, result.encoding === 'base64' ? 'base64' : 'utf8');
        hash.update(buf);
        writeSync(fd, buf);
        written += buf.length;
        // Its memory may serve the next chunk (the daemon client's block pool); nothing reads it again.
        releaseRawText(result, 'content');
        progress(written, size, 'bytes copied');
        if (result.eof || !result.nextCursor) break;
        cursor = result.nextCursor;
      }
    } catch (e) {
      closeSync(fd);
      rmSync(tmp, { force: true });
      throw e;
    }
    closeSync(fd);
    const got = hash.digest('hex');
    if (got !== sha || written !== size) {
      rmSync(tmp, { force: true });
      throw new ServiceError('CONFLICT', `artifacts_snapshot: path: ${rel} changed while it was copied; retry`, { field: 'path' });
    }
    // Commit: synchronous from here, so no other artifact call interleaves (blob GC included).
    try {
      this.checkLimits(size, sha, rel);
      const blob = this.blobPath(sha);
      if (existsSync(blob)) rmSync(tmp, { force: true });
      else {
        mkdirSync(join(this.deps.root, 'blobs', sha.slice(0, 2)), { recursive: true, mode: 0o700 });
        renameSync(tmp, blob);
      }
    } catch (e) {
      rmSync(tmp, { force: true });
      throw e;
    }
    const retention = args.retentionSeconds ?? DEFAULT_ARTIFACT_RETENTION;
    const now = this.now();
    const iso = new Date(now).toISOString();
    const { row, replaced, oldSha } = tx(this.deps.db, () => {
      this.deps.db.prepare('INSERT OR IGNORE INTO artifact_blobs (sha256, size, created_at) VALUES (?, ?, ?)').run(sha, size, iso);
      const cur = this.deps.db.prepare('SELECT * FROM artifacts WHERE owner_id = ? AND logical_name = ?').get(owner, args.logicalName) as ArtifactRow | undefined;
      const expires = now + retention * this.deps.clock.secondMs;
      let oldSha: string | undefined;
      if (cur && cur.expires_at_ms > now) {
        oldSha = cur.sha256;
        this.deps.db
          .prepare('UPDATE artifacts SET sha256 = ?, size = ?, generation = generation + 1, retention_seconds = ?, expires_at_ms = ?, source_workspace_id = ?, source_path = ?, updated_at = ? WHERE seq = ?')
          .run(sha, size, retention, expires, workspaceId, rel, iso, cur.seq);
      } else {
        if (cur) {
          oldSha = cur.sha256;
          this.deps.db.prepare('DELETE FROM artifacts WHERE seq = ?').run(cur.seq);
        }
        this.deps.db
          .prepare('INSERT INTO artifacts (id, owner_id, logical_name, sha256, size, generation, retention_seconds, expires_at_ms, source_workspace_id, source_path, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)')
          .run(newId('artifact'), owner, args.logicalName, sha, size, retention, expires, workspaceId, rel, iso, iso);
      }
      const row = this.deps.db.prepare('SELECT * FROM artifacts WHERE owner_id = ? AND logical_name = ?').get(owner, args.logicalName) as ArtifactRow;
      return { row, replaced: !!cur && cur.expires_at_ms > now, oldSha };
    });
    if (oldSha && oldSha !== sha) this.collect(oldSha);
    return { ...this.describe(row), replaced, deduplicated: written > 0 && this.refCount(sha) > 1 };
  }

  private refCount(sha: string): number {
    return this.deps.db.prepare('SELECT count(*) FROM artifacts WHERE sha256 = ?').pluck().get(sha) as number;
  }

  /** Deletes a blob no artifact refers to. */
  private collect(sha: string): void {
    if (this.refCount(sha) > 0) return;
    this.deps.db.prepare('DELETE FROM artifact_blobs WHERE sha256 = ?').run(sha);
    rmSync(this.blobPath(sha), { force: true });
  }

  list(owner: string, args: { cursor?: string; limit: number }) {
    this.sweep();
    let before = Number.MAX_SAFE_INTEGER;
    if (args.cursor) before = this.deps.cursors.decode<{ b?: number }>('artifacts_list', args.cursor).b ?? before;
    const rows = this.deps.db.prepare('SELECT * FROM artifacts WHERE owner_id = ? AND expires_at_ms > ? AND seq < ? ORDER BY seq DESC LIMIT ?').all(owner, this.now(), before, args.limit + 1) as ArtifactRow[];
    const page = rows.slice(0, args.limit);
    return {
      artifacts: page.map((r) => this.describe(r)),
      count: page.length,
      usedBytes: this.usedBytes(),
      quotaBytes: this.deps.quotaBytes,
      maxArtifactBytes: this.deps.maxBytes,
      nextCursor: rows.length > args.limit ? this.deps.cursors.encode('artifacts_list', { b: page[page.length - 1]!.seq }) : null,
    };
  }

  read(owner: string, args: { artifactId: string; offset: number; limit: number }) {
    const artifact = this.get(owner, args.artifactId, 'artifacts_read');
    if (args.offset > artifact.size) throw new ServiceError('INVALID_ARGUMENT', `artifacts_read: offset: ${args.offset} is beyond the end of the artifact (${artifact.size} bytes)`, { field: 'offset', size: artifact.size });
    const len = Math.min(args.limit, artifact.size - args.offset);
    // A large chunk is read into a block of the pool (core/raw-text.ts), given back once the answer is written.
    const buf = leaseBytes(len);
    const fd = openSync(this.blobPath(artifact.sha256), 'r');
    try {
      let got = 0;
      while (got < len) {
        const n = readSync(fd, buf, got, len - got, args.offset + got);
        if (n === 0) break;
        got += n;
      }
      if (got !== len) throw new ServiceError('INTERNAL', 'artifacts_read: the stored blob is shorter than recorded');
    } finally {
      closeSync(fd);
    }
    const end = args.offset + len;
    const out: Record<string, unknown> = {
      artifactId: artifact.id,
      logicalName: artifact.logical_name,
      generation: artifact.generation,
      size: artifact.size,
      sha256: artifact.sha256,
      offset: args.offset,
      length: len,
      encoding: 'base64',
      content: '',
      chunkSha256: createHash('sha256').update(buf).digest('hex'),
      eof: end >= artifact.size,
      nextOffset: end >= artifact.size ? null : end,
    };
    // The chunk stays bytes until read as a string: the wire base64-encodes it from them (same key order).
    defineRawText(out, 'content', buf, 'base64');
    return out;
  }

  async restore(
    owner: string,
    workspaceId: string,
    args: { artifactId: string; path: string; overwrite: boolean; expectedSha256?: string },
    signal: AbortSignal,
    progress: (p: number, t?: number, m?: string) => void,
  ) {
    const rel = checkPath(args.path, 'artifacts_restore');
    const artifact = this.get(owner, args.artifactId, 'artifacts_restore');
    const tmpName = `.atelier-restore-${randomBytes(6).toString('hex')}`;
    const env = { ATL_DST: rel, ATL_TMP: tmpName, ATL_OVERWRITE: args.overwrite ? '1' : '0', ATL_EXPECT: args.expectedSha256 ?? '', ATL_SHA: artifact.sha256 };
    // Runs inside the sandbox as the workspace user; the exit code says what was refused.
    const guard = `
      d=$(dirname -- "$ATL_DST")
      case "$(realpath -m -- "$d")" in /workspace|/workspace/*) ;; *) exit 71;; esac
      if [ -L "$ATL_DST" ]; then exit 72; fi
      if [ -d "$ATL_DST" ]; then exit 73; fi
      if [ -e "$ATL_DST" ]; then
        [ "$ATL_OVERWRITE" = 1 ] || exit 74
        if [ -n "$ATL_EXPECT" ]; then cur=$(sha256sum -- "$ATL_DST" | cut -d' ' -f1); [ "$cur" = "$ATL_EXPECT" ] || { echo "$cur"; exit 75; }; fi
      elif [ -n "$ATL_EXPECT" ]; then exit 76
      fi`;
    const run = async (script: string, stdin?: Buffer) => {
      const res = await this.deps.workspaces.exec(workspaceId, { command: `set -e\n${script}`, env, stdin, timeoutMs: 120_000, maxOutputBytes: 4096 }, undefined, signal);
      return res;
    };
    const refuse = (code: number | null, out: string): never => {
      const data = { field: 'path', path: rel };
      switch (code) {
        case 71:
          throw new ServiceError('INVALID_ARGUMENT', `artifacts_restore: path: ${rel} leads outside the workspace through a symbolic link`, { ...data, rule: 'inside the workspace' });
        case 72:
          throw new ServiceError('INVALID_ARGUMENT', `artifacts_restore: path: ${rel} is a symbolic link; restore to a regular file path`, { ...data, rule: 'no symlinks' });
        case 73:
          throw new ServiceError('FAILED_PRECONDITION', `artifacts_restore: path: ${rel} is a directory`, data);
        case 74:
          throw new ServiceError('CONFLICT', `artifacts_restore: path: ${rel} already exists; pass overwrite true to replace it`, { ...data, field: 'overwrite' });
        case 75:
          throw new ServiceError('CONFLICT', `artifacts_restore: expectedSha256: ${rel} has SHA-256 ${out.trim()}, not the expected one; nothing was written`, {
            field: 'expectedSha256',
            currentSha256: out.trim(),
          });
        case 76:
          throw new ServiceError('CONFLICT', `artifacts_restore: expectedSha256: ${rel} does not exist, so it cannot have the expected hash`, { field: 'expectedSha256' });
        default:
          throw new ServiceError('INTERNAL', `artifacts_restore: writing ${rel} in the workspace failed (exit ${code}): ${out.slice(0, 300)}`, data);
      }
    };
    let res = await run(`${guard}\nmkdir -p -- "$d"\n: > "$d/$ATL_TMP"`);
    if (res.exitCode !== 0) refuse(res.exitCode, res.stdout + res.stderr);
    try {
      const fd = openSync(this.blobPath(artifact.sha256), 'r');
      try {
        const size = fstatSync(fd).size;
        const buf = Buffer.alloc(Math.min(WRITE_CHUNK, Math.max(1, size)));
        for (let off = 0; off < size; ) {
          const count = readSync(fd, buf, 0, Math.min(buf.length, size - off), off);
          if (count === 0) break;
          res = await run('cat >> "$(dirname -- "$ATL_DST")/$ATL_TMP"', Buffer.from(buf.subarray(0, count)));
          if (res.exitCode !== 0) refuse(res.exitCode, res.stdout + res.stderr);
          off += count;
          progress(off, size, 'bytes written');
        }
      } finally {
        closeSync(fd);
      }
      res = await run(`${guard}\nt="$d/$ATL_TMP"\ngot=$(sha256sum -- "$t" | cut -d' ' -f1)\n[ "$got" = "$ATL_SHA" ] || { echo "$got"; exit 77; }\nmv -f -- "$t" "$ATL_DST"`);
      if (res.exitCode === 77) throw new ServiceError('INTERNAL', `artifacts_restore: the written file has SHA-256 ${res.stdout.trim()}, not the artifact's ${artifact.sha256}`);
      if (res.exitCode !== 0) refuse(res.exitCode, res.stdout + res.stderr);
    } catch (e) {
      await run('rm -f -- "$(dirname -- "$ATL_DST")/$ATL_TMP"').catch(() => undefined);
      throw e;
    }
    return { artifactId: artifact.id, logicalName: artifact.logical_name, generation: artifact.generation, workspaceId, path: rel, size: artifact.size, sha256: artifact.sha256, restored: true };
  }

  delete(owner: string, args: { artifactId: string; expectedGeneration: number }) {
    const artifact = this.get(owner, args.artifactId, 'artifacts_delete');
    if (artifact.generation !== args.expectedGeneration) {
      throw new ServiceError('CONFLICT', `artifacts_delete: expectedGeneration: artifact ${artifact.id} is at generation ${artifact.generation}, not ${args.expectedGeneration}; nothing was deleted`, {
        field: 'expectedGeneration',
        currentGeneration: artifact.generation,
      });
    }
    this.deps.db.prepare('DELETE FROM artifacts WHERE seq = ?').run(artifact.seq);
    this.collect(artifact.sha256);
    return { artifactId: artifact.id, logicalName: artifact.logical_name, generation: artifact.generation, deleted: true };
  }

  /** Deletes expired artifacts and unreferenced blobs; returns how many artifacts. */
  sweep(): number {
    const gone = this.deps.db.prepare('SELECT id, sha256 FROM artifacts WHERE expires_at_ms <= ?').all(this.now()) as Array<{ id: string; sha256: string }>;
    for (const g of gone) {
      this.deps.db.prepare('DELETE FROM artifacts WHERE id = ?').run(g.id);
      this.collect(g.sha256);
    }
    return gone.length;
  }

  /** At start: leftover temporary files and blobs nothing refers to (a crash between steps) go. */
  private reconcile(): void {
    const tmp = join(this.deps.root, 'tmp');
    for (const f of readdirSync(tmp)) rmSync(join(tmp, f), { force: true });
    for (const sha of this.deps.db.prepare('SELECT sha256 FROM artifact_blobs WHERE sha256 NOT IN (SELECT sha256 FROM artifacts)').pluck().all() as string[]) this.collect(sha);
    const blobs = join(this.deps.root, 'blobs');
    for (const dir of readdirSync(blobs)) {
      for (const f of readdirSync(join(blobs, dir))) {
        if (!this.deps.db.prepare('SELECT 1 FROM artifact_blobs WHERE sha256 = ?').get(f)) unlinkSync(join(blobs, dir, f));
      }
    }
  }

  start(intervalMs: number): void {
    this.reconcile();
    this.sweeper = startSweeper(() => this.sweep(), intervalMs);
  }

  stop(): void {
    this.sweeper?.stop();
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type ArtifactSnapshotResult = Awaited<ReturnType<ArtifactService['snapshot']>>;
export type ArtifactListResult = Awaited<ReturnType<ArtifactService['list']>>;
export type ArtifactReadResult = Awaited<ReturnType<ArtifactService['read']>>;
export type ArtifactRestoreResult = Awaited<ReturnType<ArtifactService['restore']>>;
export type ArtifactDeleteResult = Awaited<ReturnType<ArtifactService['delete']>>;
