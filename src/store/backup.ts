/**
 * Hot backups of a data directory and their restore (issue #35 item 2, docs/operations.md).
 *
 * A backup is a directory: `manifest.json` (written last: a directory without it is not a backup),
 * `atelier.db` (a consistent snapshot taken with `VACUUM INTO` on a connection of its own: one read
 * transaction, so writers go on and the copy is the database as of one commit), and, under the same
 * relative paths as in the data directory, what else the service keeps there that it cannot make
 * again: `config.json`, `ca/` (extra CA certificates), the artifact blobs the snapshot refers to
 * (`state/artifacts/blobs/`), agent logs (`state/agents/`), operation and task output
 * (`state/output/`) and release images (`packages/releases/*.sqfs`). Knowledge vectors, sealed
 * secrets (provider keys, repository credentials, environment secrets), tokens, the audit log and
 * every other record are rows of the database. Workspaces (their files and disk images) are never
 * in a backup: they are working copies; the manifest says how many there were.
 *
 * The master key is in a backup only when asked for (`master.key`); the manifest always holds its
 * fingerprint (a hash that does not reveal it), so a restore can check it was given the right key.
 *
 * Every file is read with O_NOFOLLOW and must be a regular file; a restore accepts only relative
 * paths of the manifest's own shape, checks every size and SHA-256 before it writes anything, and
 * writes only into an empty (or new) data directory, each file created exclusively.
 */
import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, lstatSync, mkdirSync, openSync, readdirSync, readSync, rmSync, writeSync, existsSync, readFileSync, writeFileSync, renameSync, fsyncSync } from 'node:fs';
import { dirname, join } from 'node:path';

export const BACKUP_FORMAT = 'atelier-backup';
export const BACKUP_FORMAT_VERSION = 1;
export const MANIFEST = 'manifest.json';
export const DB_FILE = 'atelier.db';

export interface BackupFile {
  path: string;
  size: number;
  sha256: string;
}

export interface BackupManifest {
  format: typeof BACKUP_FORMAT;
  formatVersion: number;
  createdAt: string;
  atelierVersion: string;
  schemaVersion: number;
  database: { file: string; integrity: 'ok'; tables: Record<string, number> };
  masterKey: { included: boolean; fingerprint: string };
  workspaces: { included: false; records: number; note: string };
  /** What was left out and why (legacy release directories, files that are not regular files). */
  skipped: Array<{ path: string; why: string }>;
  files: BackupFile[];
  totalBytes: number;
}

export interface BackupOptions {
  dataDir: string;
  dest: string;
  masterKey: Buffer;
  includeMasterKey: boolean;
  atelierVersion: string;
}

export class BackupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BackupError';
  }
}

/** A hash naming the master key without revealing it (shown in manifests and by restore). */
export function masterKeyFingerprint(key: Buffer): string {
  return 'sha256:' + createHash('sha256').update('atelier master key fingerprint\0').update(key).digest('hex').slice(0, 32);
}

const NOFOLLOW = constants.O_NOFOLLOW;

/** Copies one regular file (never through a symbolic link) to a new file; returns its size and SHA-256. */
function copyFile(from: string, to: string): { size: number; sha256: string } {
  let src: number;
  try {
    src = openSync(from, constants.O_RDONLY | NOFOLLOW);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') throw new BackupError(`${from}: is a symbolic link; a backup copies regular files only`);
    throw e;
  }
  try {
    if (!fstatSync(src).isFile()) throw new BackupError(`${from}: not a regular file`);
    mkdirSync(dirname(to), { recursive: true, mode: 0o700 });
    const dst = openSync(to, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | NOFOLLOW, 0o600);
    const hash = createHash('sha256');
    let size = 0;
    try {
      const buf = Buffer.allocUnsafe(1 << 20);
      for (;;) {
        const n = readSync(src, buf, 0, buf.length, null);
        if (n === 0) break;
        hash.update(buf.subarray(0, n));
        let off = 0;
        while (off < n) off += writeSync(dst, buf, off, n - off);
        size += n;
      }
      fsyncSync(dst);
    } finally {
      closeSync(dst);
    }
    return { size, sha256: hash.digest('hex') };
  } finally {
    closeSync(src);
  }
}

function hashFile(file: string): { size: number; sha256: string } {
  const fd = openSync(file, constants.O_RDONLY | NOFOLLOW);
  try {
    if (!fstatSync(fd).isFile()) throw new BackupError(`${file}: not a regular file`);
    const hash = createHash('sha256');
    const buf = Buffer.allocUnsafe(1 << 20);
    let size = 0;
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      hash.update(buf.subarray(0, n));
      size += n;
    }
    return { size, sha256: hash.digest('hex') };
  } finally {
    closeSync(fd);
  }
}

/** Regular files under dir (relative paths), never descending into a symbolic link; others are reported. */
function walk(root: string, rel: string, out: string[], skipped: BackupManifest['skipped'], filter: (rel: string, isDir: boolean) => boolean = () => true): void {
  const dir = join(root, rel);
  let st;
  try {
    st = lstatSync(dir);
  } catch {
    return;
  }
  if (!st.isDirectory()) return;
  for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const r = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) {
      if (filter(r, true)) walk(root, r, out, skipped, filter);
      else skipped.push({ path: r, why: 'a directory this backup does not take (see docs/operations.md)' });
    } else if (e.isFile()) {
      if (filter(r, false)) out.push(r);
    } else {
      skipped.push({ path: r, why: e.isSymbolicLink() ? 'a symbolic link (a backup copies regular files only)' : 'not a regular file' });
    }
  }
}

/** Tables of a database with their row counts (SQLite's own tables left out). */
export function tableCounts(db: Database.Database): Record<string, number> {
  const names = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").pluck().all() as string[];
  return Object.fromEntries(names.map((n) => [n, db.prepare(`SELECT count(*) FROM "${n.replace(/"/g, '""')}"`).pluck().get() as number]));
}

function checkIntegrity(file: string): { tables: Record<string, number>; schemaVersion: number; workspaces: number; blobs: string[] } {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    const result = db.prepare('PRAGMA integrity_check').pluck().all() as string[];
    if (result.length !== 1 || result[0] !== 'ok') throw new BackupError(`${file}: the integrity check failed: ${result.slice(0, 5).join('; ')}`);
    const fk = db.prepare('PRAGMA foreign_key_check').all();
    if (fk.length > 0) throw new BackupError(`${file}: ${fk.length} row(s) break a foreign key`);
    const tables = tableCounts(db);
    const schemaVersion = tables.schema_migrations !== undefined ? ((db.prepare('SELECT max(version) FROM schema_migrations').pluck().get() as number | null) ?? 0) : 0;
    const workspaces = tables.workspaces !== undefined ? (db.prepare("SELECT count(*) FROM workspaces WHERE state != 'closed'").pluck().get() as number) : 0;
    const blobs = tables.artifact_blobs !== undefined ? (db.prepare('SELECT sha256 FROM artifact_blobs ORDER BY sha256').pluck().all() as string[]) : [];
    return { tables, schemaVersion, workspaces, blobs };
  } finally {
    db.close();
  }
}

/** The destination must be new, or an empty directory (nothing is ever overwritten). */
function prepareEmptyDir(dir: string, what: string): void {
  let st;
  try {
    st = lstatSync(dir);
  } catch {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return;
  }
  if (!st.isDirectory()) throw new BackupError(`${what} ${dir}: exists and is not a directory`);
  const entries = readdirSync(dir);
  if (entries.length > 0) throw new BackupError(`${what} ${dir}: is not empty (it holds ${entries.slice(0, 5).join(', ')}${entries.length > 5 ? ', …' : ''}); give a new or empty directory: nothing is ever overwritten`);
}

const BLOB = /^state\/artifacts\/blobs\/([0-9a-f]{2})\/([0-9a-f]{64})$/;

/**
 * Takes a backup of a running (or stopped) instance into dest (new or empty). Blobs are
 * content-addressed and never change; one the snapshot names that is gone by the time it is copied
 * was collected just after the snapshot, and the whole backup is taken again (at most 3 times).
 */
export function takeBackup(o: BackupOptions): BackupManifest {
  const dbFile = join(o.dataDir, DB_FILE);
  if (!existsSync(dbFile)) throw new BackupError(`no database at ${dbFile}: is ${o.dataDir} an Atelier data directory?`);
  prepareEmptyDir(o.dest, 'backup destination');
  for (let attempt = 1; ; attempt++) {
    try {
      return attemptBackup(o, dbFile);
    } catch (e) {
      for (const f of readdirSync(o.dest)) rmSync(join(o.dest, f), { recursive: true, force: true });
      if (!(e instanceof BlobGone) || attempt >= 3) throw e;
    }
  }
}

class BlobGone extends Error {}

function attemptBackup(o: BackupOptions, dbFile: string): BackupManifest {
  const files: BackupFile[] = [];
  const skipped: BackupManifest['skipped'] = [];
  // 1. The database: one consistent snapshot, on a connection of our own.
  const src = new Database(dbFile, { fileMustExist: true });
  try {
    src.pragma('busy_timeout = 10000');
    // An empty file of our own first (mode 0600, created exclusively): VACUUM INTO fills it.
    closeSync(openSync(join(o.dest, DB_FILE), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | NOFOLLOW, 0o600));
    src.prepare('VACUUM INTO ?').run(join(o.dest, DB_FILE));
  } finally {
    src.close();
  }
  const snap = checkIntegrity(join(o.dest, DB_FILE));
  files.push({ path: DB_FILE, ...hashFile(join(o.dest, DB_FILE)) });
  // 2. Artifact blobs the snapshot refers to (each checked against its name).
  for (const sha of snap.blobs) {
    if (!/^[0-9a-f]{64}$/.test(sha)) throw new BackupError(`artifact_blobs holds a malformed digest ${JSON.stringify(sha.slice(0, 80))}`);
    const rel = `state/artifacts/blobs/${sha.slice(0, 2)}/${sha}`;
    let f;
    try {
      f = copyFile(join(o.dataDir, rel), join(o.dest, rel));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new BlobGone(sha);
      throw e;
    }
    if (f.sha256 !== sha) throw new BackupError(`artifact blob ${rel} does not match its digest (the stored file is damaged)`);
    files.push({ path: rel, ...f });
  }
  // 3. The other files the data directory keeps.
  const rels: string[] = [];
  if (lstatIsFile(join(o.dataDir, 'config.json'))) rels.push('config.json');
  walk(o.dataDir, 'ca', rels, skipped);
  walk(o.dataDir, 'state/agents', rels, skipped);
  walk(o.dataDir, 'state/output', rels, skipped);
  walk(o.dataDir, 'packages/releases', rels, skipped, (r, isDir) => !isDir && r.endsWith('.sqfs'));
  for (const rel of rels) {
    try {
      files.push({ path: rel, ...copyFile(join(o.dataDir, rel), join(o.dest, rel)) });
    } catch (e) {
      // A log or output file removed while the backup ran (its record went too, or it is newer than the snapshot).
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') skipped.push({ path: rel, why: 'removed while the backup ran' });
      else throw e;
    }
  }
  if (o.includeMasterKey) {
    const p = join(o.dest, 'master.key');
    writeFileSync(p, o.masterKey.toString('base64') + '\n', { mode: 0o600, flag: 'wx' });
    files.push({ path: 'master.key', ...hashFile(p) });
  }
  const manifest: BackupManifest = {
    format: BACKUP_FORMAT,
    formatVersion: BACKUP_FORMAT_VERSION,
    createdAt: new Date().toISOString(),
    atelierVersion: o.atelierVersion,
    schemaVersion: snap.schemaVersion,
    database: { file: DB_FILE, integrity: 'ok', tables: snap.tables },
    masterKey: { included: o.includeMasterKey, fingerprint: masterKeyFingerprint(o.masterKey) },
    workspaces: {
      included: false,
      records: snap.workspaces,
      note: 'workspace files are not in a backup (push work to its repository); a restore closes the workspaces it finds open',
    },
    skipped,
    files,
    totalBytes: files.reduce((a, f) => a + f.size, 0),
  };
  const tmp = join(o.dest, MANIFEST + '.tmp');
  writeFileSync(tmp, JSON.stringify(manifest, null, 2) + '\n', { mode: 0o600, flag: 'wx' });
  renameSync(tmp, join(o.dest, MANIFEST));
  return manifest;
}

function lstatIsFile(p: string): boolean {
  try {
    return lstatSync(p).isFile();
  } catch {
    return false;
  }
}

/** A path a manifest may name: relative, of the shapes a backup writes, nothing that climbs out. */
function allowedPath(p: unknown): p is string {
  if (typeof p !== 'string' || p.length === 0 || p.length > 512) return false;
  if (p.startsWith('/') || p.includes('\\') || p.includes('\0')) return false;
  const segs = p.split('/');
  if (segs.some((s) => s === '' || s === '.' || s === '..' || !/^[A-Za-z0-9._@+=-]+$/.test(s))) return false;
  return p === DB_FILE || p === 'master.key' || p === 'config.json' || BLOB.test(p) || /^(ca|state\/agents|state\/output|packages\/releases)\//.test(p);
}

/**
 * Reads and checks a backup: the manifest's shape, every file's size and SHA-256, the database's
 * integrity and row counts. Throws a BackupError naming the first problem; writes nothing.
 */
export function verifyBackup(src: string): BackupManifest {
  const mf = join(src, MANIFEST);
  if (!lstatIsFile(mf)) throw new BackupError(`${src}: no ${MANIFEST} (not a backup, or one that did not finish)`);
  let m: BackupManifest;
  try {
    m = JSON.parse(readFileSync(mf, 'utf8')) as BackupManifest;
  } catch (e) {
    throw new BackupError(`${mf}: not valid JSON (${(e as Error).message})`);
  }
  if (m?.format !== BACKUP_FORMAT) throw new BackupError(`${mf}: format: must be "${BACKUP_FORMAT}"`);
  if (m.formatVersion !== BACKUP_FORMAT_VERSION) throw new BackupError(`${mf}: formatVersion ${String(m.formatVersion)} is not one this release reads (${BACKUP_FORMAT_VERSION})`);
  if (!Array.isArray(m.files) || m.files.length === 0) throw new BackupError(`${mf}: files: must list the backup's files`);
  if (typeof m.masterKey?.fingerprint !== 'string') throw new BackupError(`${mf}: masterKey.fingerprint: missing`);
  const seen = new Set<string>();
  for (const f of m.files) {
    if (!allowedPath(f?.path)) throw new BackupError(`${mf}: files: path ${JSON.stringify(String(f?.path).slice(0, 200))} is not one a backup writes (relative, no "..", known directories only)`);
    if (seen.has(f.path)) throw new BackupError(`${mf}: files: ${f.path} is listed twice`);
    seen.add(f.path);
    if (!Number.isSafeInteger(f.size) || f.size < 0 || typeof f.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(f.sha256)) throw new BackupError(`${mf}: files: ${f.path}: size and sha256 are required`);
    let got;
    try {
      got = hashFile(join(src, f.path));
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      throw new BackupError(`${join(src, f.path)}: ${code === 'ENOENT' ? 'missing' : code === 'ELOOP' ? 'is a symbolic link' : (e as Error).message}`);
    }
    if (got.size !== f.size || got.sha256 !== f.sha256) throw new BackupError(`${join(src, f.path)}: does not match the manifest (size ${got.size}, expected ${f.size}; the checksum differs): the backup is damaged or was changed`);
    const blob = BLOB.exec(f.path);
    if (blob && blob[2] !== f.sha256) throw new BackupError(`${join(src, f.path)}: an artifact blob whose content does not match its name`);
  }
  if (!seen.has(DB_FILE)) throw new BackupError(`${mf}: files: ${DB_FILE} is missing`);
  if (m.masterKey.included !== seen.has('master.key')) throw new BackupError(`${mf}: masterKey.included does not agree with the files listed`);
  const snap = checkIntegrity(join(src, DB_FILE));
  for (const [t, n] of Object.entries(m.database?.tables ?? {})) {
    if (snap.tables[t] !== n) throw new BackupError(`${join(src, DB_FILE)}: table ${t} holds ${snap.tables[t] ?? 'no'} rows, the manifest says ${n}`);
  }
  return m;
}

/**
 * Copies a verified backup into an empty (or new) data directory. The master key is the backup's
 * (when it holds one) or the one given, which must match the manifest's fingerprint. The database
 * is left at the backup's schema version: the caller opens it, which migrates it forward.
 */
export function restoreBackup(o: { src: string; dataDir: string; masterKey?: Buffer; masterKeyFromEnv?: boolean }): BackupManifest {
  const m = verifyBackup(o.src);
  if (m.masterKey.included) {
    if (o.masterKey && masterKeyFingerprint(o.masterKey) !== m.masterKey.fingerprint) throw new BackupError(`the master key given is not the one this backup was taken with (fingerprint ${masterKeyFingerprint(o.masterKey)}, the backup's ${m.masterKey.fingerprint})`);
  } else {
    if (!o.masterKey)
      throw new BackupError(
        `this backup holds no master key (fingerprint ${m.masterKey.fingerprint}): give the instance's key with --master-key-file FILE or ATELIER_MASTER_KEY; without it sealed secrets (provider keys, repository credentials, environment secrets) cannot be opened`,
      );
    if (masterKeyFingerprint(o.masterKey) !== m.masterKey.fingerprint) throw new BackupError(`the master key given is not the one this backup was taken with (fingerprint ${masterKeyFingerprint(o.masterKey)}, the backup's ${m.masterKey.fingerprint})`);
  }
  prepareEmptyDir(o.dataDir, 'data directory');
  for (const f of m.files) {
    const got = copyFile(join(o.src, f.path), join(o.dataDir, f.path));
    // Checked again as written: the backup may not change between the check and the copy.
    if (got.sha256 !== f.sha256) throw new BackupError(`${join(o.src, f.path)}: changed while it was restored`);
  }
  if (!m.masterKey.included && o.masterKey && !o.masterKeyFromEnv) {
    writeFileSync(join(o.dataDir, 'master.key'), o.masterKey.toString('base64') + '\n', { mode: 0o600, flag: 'wx' });
  }
  return m;
}
