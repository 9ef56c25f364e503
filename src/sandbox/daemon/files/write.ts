/** fs.write and fs.writeBatch: whole-file writes through the staging steps (./context.ts), a batch atomic or per file. */
import { DaemonError, type FsWriteBatchReply } from '../protocol.js';
import { FILE_LIMITS, invalid, obj } from './common.js';
import { fsError } from './confinement.js';
import { unpackContent } from './content.js';
import { DirPool, type PreparedWrite } from './context.js';
import type { Handlers } from '../server.js';
import type { FileContext } from './context.js';

export function writeMethods(fc: FileContext): Handlers<'fs.write' | 'fs.writeBatch'> {
  const { exclusive, changed } = fc;
  const { prepare, check, commit, discard, undoCreated, writeResult } = fc.staging;
  const methods: Handlers<'fs.write' | 'fs.writeBatch'> = {
    'fs.write': (params) =>
      exclusive(async () => {
        const p = unpackContent(obj(params));
        const created: string[] = [];
        const pool = new DirPool();
        let w: PreparedWrite | undefined;
        try {
          w = await prepare(pool, 0, p.path, p.content, p.expectedSha256, true, created, 'path');
          await check(w, 'path');
          commit(w, 'path');
        } catch (e) {
          if (w) discard(w);
          pool.closeAll(false);
          undoCreated(created);
          throw e;
        }
        pool.closeAll(true);
        changed([w.entry.rel]);
        return writeResult(w);
      }),

    'fs.writeBatch': (params) =>
      exclusive(async () => {
        const p = obj(params);
        const files = Array.isArray(p.files) ? p.files.map((f) => (f !== null && typeof f === 'object' && !Array.isArray(f) ? unpackContent(f as Record<string, unknown>) : f)) : p.files;
        if (!Array.isArray(files) || files.length === 0) throw invalid('files must be a non-empty array', { field: 'files' });
        if (files.length > FILE_LIMITS.batchFiles) throw invalid(`files has ${files.length} entries; the limit is ${FILE_LIMITS.batchFiles}`, { field: 'files' });
        const createParents = p.createParents !== false;
        const atomic = p.atomic !== false;
        let total = 0;
        for (const f of files) total += typeof (f as { content?: unknown })?.content === 'string' ? Buffer.byteLength((f as { content: string }).content) : 0;
        if (total > FILE_LIMITS.batchBytes) throw invalid(`files: the batch holds ${total} bytes; the limit is ${FILE_LIMITS.batchBytes}`, { field: 'files' });
        return atomic ? batchAtomic(files, createParents) : batchEach(files, createParents);
      }),

  };

  /** All or nothing: stage every file, check every hash, then rename them all. */
  async function batchAtomic(files: unknown[], createParents: boolean): Promise<FsWriteBatchReply> {
    const created: string[] = [];
    const pool = new DirPool();
    const staged: PreparedWrite[] = [];
    const failures: Array<{ index: number; path: string; code: string; message: string; details: Record<string, unknown> }> = [];
    const seen = new Map<string, number>();
    for (let i = 0; i < files.length; i++) {
      const field = `files[${i}].path`;
      const f = (typeof files[i] === 'object' && files[i] !== null ? files[i] : {}) as Record<string, unknown>;
      try {
        const w = await prepare(pool, i, f.path, f.content, f.expectedSha256, createParents, created, field);
        staged.push(w);
        const prev = seen.get(w.entry.rel);
        if (prev !== undefined) throw invalid(`${field}: ${w.shown} names the same file as files[${prev}]`, { field, path: w.shown });
        seen.set(w.entry.rel, i);
        await check(w, field);
      } catch (e) {
        const d = e instanceof DaemonError ? e : fsError(e, field, String(f.path));
        failures.push({ index: i, path: String(f.path), code: d.code, message: d.message, details: d.details });
      }
    }
    if (failures.length > 0) {
      for (const w of staged) discard(w);
      pool.closeAll(false);
      undoCreated(created);
      const first = failures[0]!;
      const code = failures.every((x) => x.code === 'CONFLICT') ? 'CONFLICT' : first.code;
      const more = failures.length > 1 ? ` (and ${failures.length - 1} more failure${failures.length > 2 ? 's' : ''})` : '';
      throw new DaemonError(code as DaemonError['code'], `${first.message}${more}; the batch is atomic, so no file was written`, {
        failures: failures.slice(0, 50),
        failed: failures.length,
        written: 0,
      });
    }
    // Renames: each one atomic; only a crash (or an I/O error) between two of them can leave part
    // of a batch applied. A failed rename puts back nothing already renamed (documented).
    let renamed = 0;
    try {
      for (const w of staged) {
        commit(w, `files[${w.index}].path`);
        renamed++;
      }
    } catch (e) {
      for (const w of staged.slice(renamed)) discard(w);
      pool.closeAll(true);
      changed(staged.slice(0, renamed).map((w) => w.entry.rel));
      const d = e instanceof DaemonError ? e : new DaemonError('INTERNAL', String(e));
      throw new DaemonError(d.code, `${d.message}; ${renamed} of ${staged.length} files were already written before the failure`, { ...d.details, written: renamed, partial: renamed > 0 });
    }
    pool.closeAll(true);
    changed(staged.map((w) => w.entry.rel));
    return { atomic: true, written: staged.length, failed: 0, files: staged.map(writeResult) };
  }

  /** Each file on its own (each write still atomic); failures are reported per file. */
  async function batchEach(files: unknown[], createParents: boolean): Promise<FsWriteBatchReply> {
    const results: Extract<FsWriteBatchReply, { atomic: false }>['files'] = [];
    let written = 0;
    for (let i = 0; i < files.length; i++) {
      const field = `files[${i}].path`;
      const f = (typeof files[i] === 'object' && files[i] !== null ? files[i] : {}) as Record<string, unknown>;
      const created: string[] = [];
      const pool = new DirPool();
      let w: PreparedWrite | undefined;
      try {
        w = await prepare(pool, i, f.path, f.content, f.expectedSha256, createParents, created, field);
        await check(w, field);
        commit(w, field);
        pool.closeAll(true);
        changed([w.entry.rel]);
        written++;
        results.push({ ok: true, ...writeResult(w) });
      } catch (e) {
        if (w) discard(w);
        pool.closeAll(false);
        undoCreated(created);
        const d = e instanceof DaemonError ? e : fsError(e, field, String(f.path));
        results.push({ ok: false, path: String(f.path), error: { code: d.code, message: d.message, details: d.details } });
      }
    }
    return { atomic: false, written, failed: files.length - written, files: results };
  }

  return methods;
}
