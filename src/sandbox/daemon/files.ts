/**
 * File methods of the daemon (fs.list, fs.read, fs.write, fs.writeBatch, fs.patch, fs.delete,
 * fs.move, fs.mkdir) and the confinement every file and search method goes through.
 *
 * Runs inside the sandbox as the workspace user, so the kernel already confines it; the checks here
 * hold on their own anyway (tests run the daemon on the host). The rules, see docs/files.md:
 *
 *  - a path is relative to the workspace root: absolute paths and any `..` segment are refused up
 *    front with PERMISSION_DENIED naming the path;
 *  - a path is walked one component at a time from an open directory descriptor of the root. Each
 *    step opens `/proc/self/fd/<parent>/<name>` with O_NOFOLLOW, which behaves like openat(2): the
 *    step is relative to the directory already verified, so swapping an earlier component for a
 *    symlink while a call runs changes nothing;
 *  - a symlink met on the way is followed only when its realpath stays under the root, and the
 *    descriptor opened on its target is verified again through readlink(/proc/self/fd/<fd>);
 *  - files are opened with O_NOFOLLOW | O_NONBLOCK and checked with fstat: directories, devices,
 *    fifos and sockets are refused for reads and writes (and a fifo never blocks the daemon);
 *  - writes go to a temporary file in the target's directory (`.atelier-tmp-<random>`), which is
 *    written, fsynced, given the mode of the file it replaces (new files 0644) and renamed over the
 *    target; with an expected SHA-256 the current file is hashed just before the rename, under the
 *    daemon's mutation lock, and a mismatch changes nothing (CONFLICT with the current hash);
 *  - content is never transformed: bytes in, bytes out (line endings included).
 *
 * Imports node built-ins and sibling daemon files only.
 */
import { isUtf8 } from 'node:buffer';
import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  constants as FS,
  fchmodSync,
  fstatSync,
  fsync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  read,
  readdirSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmdirSync,
  unlinkSync,
  write,
  type BigIntStats,
  type Stats,
} from 'node:fs';
import { promisify } from 'node:util';
import { DaemonError } from './protocol.js';
import type { MethodTable } from './server.js';

const readAsync = promisify(read);
const writeAsync = promisify(write);
const fsyncAsync = promisify(fsync);

export const FILE_LIMITS = {
  /** files_write / files_write_batch content, in characters (the spec's limit). */
  contentChars: 1_048_576,
  /** files_apply_patch oldText and newText, in characters. */
  patchChars: 262_144,
  /** files_read bytes per call (and in total with readAll). */
  readBytes: 1_048_576,
  /** Largest file files_apply_patch loads. */
  patchFileBytes: 16 * 1024 * 1024,
  /** Entries per files_list page. */
  listPage: 500,
  /** files_write_batch entries, and the total bytes of one batch. */
  batchFiles: 1000,
  batchBytes: 16 * 1024 * 1024,
  /** Symlinks followed while resolving one path. */
  symlinkHops: 8,
  /** Locations reported when oldText occurs more than once. */
  patchLocations: 20,
} as const;

const O_DIR = FS.O_RDONLY | FS.O_DIRECTORY;
const O_DIR_NOFOLLOW = O_DIR | FS.O_NOFOLLOW;
const O_READ = FS.O_RDONLY | FS.O_NOFOLLOW | FS.O_NONBLOCK;
const TMP_PREFIX = '.atelier-tmp-';
const DEFAULT_FILE_MODE = 0o644;
const DEFAULT_DIR_MODE = 0o755;

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/** An unpaired UTF-16 surrogate. */
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

const denied = (message: string, details: Record<string, unknown> = {}) => new DaemonError('PERMISSION_DENIED', message, details);
const invalid = (message: string, details: Record<string, unknown> = {}) => new DaemonError('INVALID_ARGUMENT', message, details);
const notFound = (message: string, details: Record<string, unknown> = {}) => new DaemonError('NOT_FOUND', message, details);
const precondition = (message: string, details: Record<string, unknown> = {}) => new DaemonError('FAILED_PRECONDITION', message, details);
const conflict = (message: string, details: Record<string, unknown> = {}) => new DaemonError('CONFLICT', message, details);

const errno = (e: unknown): string | undefined => (e as NodeJS.ErrnoException | undefined)?.code;

/** Names the kind of a non-regular file, for messages. */
export function kindOf(st: Stats | BigIntStats): EntryType {
  if (st.isFile()) return 'file';
  if (st.isDirectory()) return 'directory';
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isFIFO()) return 'fifo';
  if (st.isSocket()) return 'socket';
  if (st.isCharacterDevice()) return 'char-device';
  if (st.isBlockDevice()) return 'block-device';
  return 'other';
}

export type EntryType = 'file' | 'directory' | 'symlink' | 'fifo' | 'socket' | 'char-device' | 'block-device' | 'other';

// ---------------------------------------------------------------------------------------------
// Confinement
// ---------------------------------------------------------------------------------------------

/** An entry resolved inside the workspace: its directory (open) and its name in it. */
export interface Entry {
  /** Descriptor of the directory holding the entry (the caller closes it with release()). */
  dir: number;
  /** Name in dir; '' for the root itself. */
  name: string;
  /** Real path of the entry relative to the root ('.' for the root). */
  rel: string;
  /** lstat of the entry, undefined when it does not exist. */
  st: Stats | undefined;
}

export class Confinement {
  readonly root: string;

  constructor(root: string) {
    this.root = realpathSync.native(root);
  }

  /** The validated segments of a workspace-relative path ('.' and empty segments dropped). */
  segments(p: unknown, field = 'path'): string[] {
    if (typeof p !== 'string' || p.length === 0) throw invalid(`${field} must be a non-empty string`, { field });
    if (p.length > 4096) throw invalid(`${field} is longer than 4096 characters`, { field });
    if (p.includes('\0')) throw invalid(`${field}: ${JSON.stringify(p)} contains a NUL character`, { field, path: p });
    // A lone UTF-16 surrogate has no UTF-8 form: the file system would get U+FFFD instead, so two
    // different names would write one file. Refused, never replaced.
    if (LONE_SURROGATE.test(p)) throw invalid(`${field}: ${JSON.stringify(p)} contains a lone UTF-16 surrogate, which no file name can hold`, { field, rule: 'well-formed Unicode' });
    if (p.startsWith('/')) {
      throw denied(`${field}: ${p} is an absolute path and leaves the workspace; paths are relative to the workspace root`, { field, path: p });
    }
    const segs = p.split('/').filter((s) => s !== '' && s !== '.');
    if (segs.includes('..')) throw denied(`${field}: ${p} leaves the workspace ('..' segments are not allowed)`, { field, path: p });
    for (const s of segs) if (Buffer.byteLength(s) > 255) throw invalid(`${field}: a component of ${p} is longer than 255 bytes`, { field, path: p });
    return segs;
  }

  /** True when an absolute path is the root or under it. */
  inside(abs: string): boolean {
    return abs === this.root || abs.startsWith(this.root === '/' ? '/' : this.root + '/');
  }

  /** Root-relative form of an absolute path under the root ('.' for the root). */
  relOf(abs: string): string {
    return abs === this.root ? '.' : abs.slice(this.root.length + 1);
  }

  /** Where an open descriptor really is, checked to be inside the root. */
  verify(fd: number, shown: string, field = 'path'): string {
    let where = readlinkSync(fdPath(fd));
    if (where.endsWith(' (deleted)')) where = where.slice(0, -' (deleted)'.length);
    if (!this.inside(where)) throw denied(`${field}: ${shown} leaves the workspace`, { field, path: shown });
    return this.relOf(where);
  }

  openRoot(): number {
    return openSync(this.root, O_DIR);
  }

  /**
   * Opens the directory named by `segs`, one component at a time (see the module comment).
   * With `create`, missing directories are made (mode 0755) and their root-relative paths pushed
   * to `created`. Returns the open descriptor and the directory's real root-relative path.
   */
  openDir(segs: string[], shown: string, opts: { create?: boolean; created?: string[]; field?: string } = {}): { fd: number; rel: string } {
    const field = opts.field ?? 'path';
    let fd = this.openRoot();
    let rel = '.';
    try {
      for (let i = 0; i < segs.length; i++) {
        const seg = segs[i]!;
        const here = fdPath(fd, seg);
        const prefix = segs.slice(0, i + 1).join('/');
        let next: number;
        try {
          next = openSync(here, O_DIR_NOFOLLOW);
          rel = joinRel(rel, seg);
        } catch (e) {
          const code = errno(e);
          if (code === 'ENOENT') {
            if (!opts.create) throw notFound(`${field}: ${shown} does not exist (no ${prefix})`, { field, path: shown, missing: prefix });
            try {
              mkdirSync(here, DEFAULT_DIR_MODE);
            } catch (me) {
              if (errno(me) !== 'EEXIST') throw fsError(me, field, shown);
            }
            try {
              next = openSync(here, O_DIR_NOFOLLOW);
            } catch (oe) {
              throw fsError(oe, field, shown); // replaced by something else right after mkdir
            }
            fchmodSync(next, DEFAULT_DIR_MODE); // the daemon's umask is 077
            rel = joinRel(rel, seg);
            opts.created?.push(rel);
          } else if (code === 'ENOTDIR' || code === 'ELOOP') {
            const st = lstatSync(here);
            if (!st.isSymbolicLink()) throw precondition(`${field}: ${prefix} is not a directory (it is a ${kindOf(st)})`, { field, path: shown, at: prefix });
            ({ fd: next, rel } = this.followDir(here, shown, prefix, field));
          } else {
            throw fsError(e, field, shown);
          }
        }
        closeSync(fd);
        fd = next;
      }
      return { fd, rel };
    } catch (e) {
      closeSync(fd);
      throw e;
    }
  }

  /** Follows a symlink to a directory when its target stays inside; the result is verified. */
  private followDir(linkPath: string, shown: string, prefix: string, field: string): { fd: number; rel: string } {
    const target = this.realTarget(linkPath, shown, prefix, field);
    let fd: number;
    try {
      fd = openSync(target, O_DIR);
    } catch (e) {
      if (errno(e) === 'ENOTDIR') throw precondition(`${field}: ${prefix} is not a directory`, { field, path: shown, at: prefix });
      throw fsError(e, field, shown);
    }
    try {
      return { fd, rel: this.verify(fd, shown, field) };
    } catch (e) {
      closeSync(fd);
      throw e;
    }
  }

  /** The realpath of a symlink, refused when it leaves the root; NOT_FOUND when it dangles. */
  realTarget(linkPath: string, shown: string, prefix: string, field = 'path'): string {
    let target: string;
    try {
      target = realpathSync.native(linkPath);
    } catch (e) {
      if (errno(e) === 'ENOENT') throw notFound(`${field}: ${shown}: the symlink ${prefix} points to nothing`, { field, path: shown, at: prefix });
      if (errno(e) === 'ELOOP') throw invalid(`${field}: ${shown}: too many levels of symlinks at ${prefix}`, { field, path: shown });
      throw fsError(e, field, shown);
    }
    if (!this.inside(target)) throw denied(`${field}: ${shown} leaves the workspace (the symlink ${prefix} points outside it)`, { field, path: shown, at: prefix });
    return target;
  }

  /**
   * Resolves a path to its entry: the parent directory open, the final name and its lstat.
   * `follow`: a final symlink that stays inside is replaced by its target (reads, writes); without
   * it the symlink itself is the entry (delete, move). `create` makes missing parent directories.
   */
  resolve(p: unknown, opts: { field?: string; follow?: boolean; create?: boolean; created?: string[] } = {}): Entry {
    const field = opts.field ?? 'path';
    const shown = String(p);
    let segs = this.segments(p, field);
    for (let hop = 0; hop <= FILE_LIMITS.symlinkHops; hop++) {
      if (segs.length === 0) return { dir: this.openRoot(), name: '', rel: '.', st: lstatSync(this.root) };
      const name = segs[segs.length - 1]!;
      const parent = this.openDir(segs.slice(0, -1), shown, { create: opts.create, created: opts.created, field });
      let st: Stats | undefined;
      try {
        st = lstatSync(fdPath(parent.fd, name));
      } catch (e) {
        if (errno(e) !== 'ENOENT') {
          closeSync(parent.fd);
          throw fsError(e, field, shown);
        }
      }
      if (!st?.isSymbolicLink() || !opts.follow) return { dir: parent.fd, name, rel: joinRel(parent.rel, name), st };
      // A final symlink: continue with its target's root-relative path (refused when outside).
      try {
        const target = this.realTarget(fdPath(parent.fd, name), shown, segs.join('/'), field);
        segs = target === this.root ? [] : this.relOf(target).split('/');
      } finally {
        closeSync(parent.fd);
      }
    }
    throw invalid(`${field}: ${shown}: too many levels of symlinks`, { field, path: shown });
  }

  /**
   * Opens an existing regular file for reading (following a final symlink that stays inside).
   * Everything else is refused: directories with FAILED_PRECONDITION, devices, fifos and sockets
   * with PERMISSION_DENIED.
   */
  openFile(p: unknown, field = 'path'): { fd: number; rel: string; st: BigIntStats } {
    const shown = String(p);
    for (let attempt = 0; attempt < 3; attempt++) {
      const e = this.resolve(p, { field, follow: true });
      try {
        if (!e.st) throw notFound(`${field}: ${shown} does not exist`, { field, path: shown });
        let fd: number;
        try {
          fd = openSync(fdPath(e.dir, e.name), O_READ);
        } catch (err) {
          // Swapped for a symlink since the lstat: resolve again (the new target is checked).
          if (errno(err) === 'ELOOP') continue;
          if (errno(err) === 'ENOENT') throw notFound(`${field}: ${shown} does not exist`, { field, path: shown });
          throw fsError(err, field, shown);
        }
        try {
          const st = fstatSync(fd, { bigint: true });
          refuseNonRegular(st, shown, field);
          const rel = this.verify(fd, shown, field);
          return { fd, rel, st };
        } catch (err) {
          closeSync(fd);
          throw err;
        }
      } finally {
        if (e.dir >= 0) closeSync(e.dir);
      }
    }
    throw denied(`${field}: ${shown} kept changing into a symlink while it was opened`, { field, path: shown });
  }
}

function refuseNonRegular(st: Stats | BigIntStats, shown: string, field: string): void {
  if (st.isFile()) return;
  if (st.isDirectory()) throw precondition(`${field}: ${shown} is a directory, not a file (files_list lists directories)`, { field, path: shown, type: 'directory' });
  throw denied(`${field}: ${shown} is not a regular file (it is a ${kindOf(st)}); only regular files are read or written`, { field, path: shown, type: kindOf(st) });
}

/** `/proc/self/fd/<fd>[/<name>]`: a path that resolves relative to an open directory, like openat(2). */
export function fdPath(fd: number, name?: string): string {
  return name ? `/proc/self/fd/${fd}/${name}` : `/proc/self/fd/${fd}`;
}

export function joinRel(dir: string, name: string): string {
  return dir === '.' ? name : `${dir}/${name}`;
}

export function parentRel(rel: string): string {
  const i = rel.lastIndexOf('/');
  return i < 0 ? '.' : rel.slice(0, i);
}

/** A filesystem error as a DaemonError naming the path. */
export function fsError(e: unknown, field: string, shown: string): DaemonError {
  if (e instanceof DaemonError) return e;
  const code = errno(e);
  const d = { field, path: shown, errno: code };
  switch (code) {
    case 'ENOENT':
      return notFound(`${field}: ${shown} does not exist`, d);
    case 'EACCES':
    case 'EPERM':
      return denied(`${field}: ${shown}: permission denied`, d);
    case 'ENOTDIR':
      return precondition(`${field}: a component of ${shown} is not a directory`, d);
    case 'EISDIR':
      return precondition(`${field}: ${shown} is a directory`, d);
    case 'ENOTEMPTY':
    case 'EEXIST':
      return precondition(`${field}: ${shown}: directory is not empty`, d);
    case 'ENOSPC':
    case 'EDQUOT':
      return new DaemonError('RESOURCE_EXHAUSTED', `${field}: ${shown}: the workspace disk is full`, d);
    case 'ENAMETOOLONG':
      return invalid(`${field}: ${shown}: name too long`, d);
    case 'EROFS':
      return denied(`${field}: ${shown}: read-only file system`, d);
    case 'ELOOP':
      return denied(`${field}: ${shown} changed into a symlink while the call ran`, d);
    default:
      return new DaemonError('INTERNAL', `${field}: ${shown}: ${(e as Error)?.message ?? String(e)}`, d);
  }
}

// ---------------------------------------------------------------------------------------------
// Hashing
// ---------------------------------------------------------------------------------------------

/** SHA-256 of whole files keyed by identity and change times, so paging a big file hashes it once. */
class HashCache {
  private readonly map = new Map<string, string>();
  constructor(private readonly max = 4096) {}

  private key(st: BigIntStats): string {
    return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  }

  get(st: BigIntStats): string | undefined {
    const k = this.key(st);
    const v = this.map.get(k);
    if (v !== undefined) {
      this.map.delete(k);
      this.map.set(k, v);
    }
    return v;
  }

  set(st: BigIntStats, sha: string): void {
    this.map.set(this.key(st), sha);
    if (this.map.size > this.max) this.map.delete(this.map.keys().next().value!);
  }
}

const CHUNK = 1024 * 1024;

/** Hashes an open file from its start, reading in 1 MiB chunks (never blocks the event loop for long). */
export async function hashFd(fd: number): Promise<{ sha256: string; size: number }> {
  const h = createHash('sha256');
  const buf = Buffer.allocUnsafe(CHUNK);
  let pos = 0;
  for (;;) {
    const { bytesRead } = await readAsync(fd, buf, 0, CHUNK, pos);
    if (bytesRead === 0) break;
    h.update(buf.subarray(0, bytesRead));
    pos += bytesRead;
  }
  return { sha256: h.digest('hex'), size: pos };
}

export function sha256(buf: Buffer): string {
  return createHash('sha256').update(buf).digest('hex');
}

async function readRange(fd: number, offset: number, length: number): Promise<Buffer> {
  const buf = Buffer.allocUnsafe(length);
  let got = 0;
  while (got < length) {
    const { bytesRead } = await readAsync(fd, buf, got, length - got, offset + got);
    if (bytesRead === 0) break;
    got += bytesRead;
  }
  return got === length ? buf : buf.subarray(0, got);
}

async function writeAll(fd: number, data: Buffer): Promise<void> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await writeAsync(fd, data, done, data.length - done, null);
    done += bytesWritten;
  }
}

/**
 * Length of the longest prefix that does not end inside a UTF-8 sequence (drops at most 3 bytes of
 * an unfinished character at the end), so pages of a text file stay valid UTF-8 on their own.
 */
export function utf8Boundary(buf: Buffer): number {
  const n = buf.length;
  for (let back = 1; back <= Math.min(3, n); back++) {
    const b = buf[n - back]!;
    if ((b & 0xc0) === 0x80) continue; // continuation byte: look further back
    if (b < 0x80) return n; // ASCII: complete
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

/**
 * Write content may come as `contentBase64` (the UTF-8 bytes of the text, base64) instead of
 * `content`: the runner sends that form when JSON escaping would make the text much larger (control
 * characters become six bytes each), so the largest valid batch fits one protocol line.
 */
function unpackContent(p: Record<string, unknown>): Record<string, unknown> {
  if (typeof p.contentBase64 !== 'string') return p;
  if (p.content !== undefined) throw invalid('give content or contentBase64, not both', { field: 'content' });
  const { contentBase64, ...rest } = p;
  return { ...rest, content: Buffer.from(contentBase64 as string, 'base64').toString('utf8') };
}

/** The encoding rule: valid UTF-8 without NUL bytes is text, anything else base64. */
export function encodeChunk(buf: Buffer): { encoding: 'utf-8' | 'base64'; content: string } {
  if (buf.indexOf(0) === -1 && isUtf8(buf)) return { encoding: 'utf-8', content: buf.toString('utf8') };
  return { encoding: 'base64', content: buf.toString('base64') };
}

// ---------------------------------------------------------------------------------------------
// Methods
// ---------------------------------------------------------------------------------------------

export interface FileMethodOptions {
  root: string;
  /** Told the real root-relative paths that a method changed (the symbol index listens). */
  onChange?: (rels: string[]) => void;
}

interface PreparedWrite {
  index: number;
  shown: string;
  entry: Entry;
  tmp: string;
  expected?: string;
  created: boolean;
  size: number;
  sha256: string;
  mode: number;
}

/**
 * The directories one call writes into, each opened once: a batch of many files in a few
 * directories holds a few descriptors. closeAll(true) fsyncs each (making the renames durable).
 */
class DirPool {
  private readonly byRel = new Map<string, number>();
  private readonly fds = new Set<number>();

  adopt(entry: Entry): Entry {
    const dirRel = parentRel(entry.rel);
    const have = this.byRel.get(dirRel);
    if (have !== undefined && have !== entry.dir) {
      closeSync(entry.dir);
      return { ...entry, dir: have };
    }
    this.byRel.set(dirRel, entry.dir);
    this.fds.add(entry.dir);
    return entry;
  }

  closeAll(durable: boolean): void {
    for (const fd of this.fds) {
      if (durable) fsync(fd, () => closeSync(fd));
      else closeSync(fd);
    }
    this.fds.clear();
    this.byRel.clear();
  }
}

const modeString = (mode: number): string => (mode & 0o7777).toString(8).padStart(4, '0');

export function fileMethods(opts: FileMethodOptions): { methods: MethodTable; confinement: Confinement } {
  const c = new Confinement(opts.root);
  const hashes = new HashCache();
  const changed = (rels: string[]): void => {
    try {
      opts.onChange?.(rels);
    } catch {
      // a listener's problem is not the write's
    }
  };

  // Every method that changes files runs alone: a compare-and-swap is then tight against every
  // other tool call (other writers inside the workspace are a documented window of microseconds).
  let queue: Promise<unknown> = Promise.resolve();
  const exclusive = <T>(fn: () => Promise<T>): Promise<T> => {
    const run = queue.then(fn, fn);
    queue = run.catch(() => undefined);
    return run;
  };

  const currentHash = async (entry: Entry, shown: string, field: string): Promise<string | null> => {
    let fd: number;
    try {
      fd = openSync(fdPath(entry.dir, entry.name), O_READ);
    } catch (e) {
      if (errno(e) === 'ENOENT') return null;
      if (errno(e) === 'ELOOP') throw denied(`${field}: ${shown} changed into a symlink while the call ran`, { field, path: shown });
      throw fsError(e, field, shown);
    }
    try {
      const st = fstatSync(fd, { bigint: true });
      refuseNonRegular(st, shown, field);
      const cached = hashes.get(st);
      if (cached) return cached;
      const { sha256: h } = await hashFd(fd);
      hashes.set(st, h);
      return h;
    } finally {
      closeSync(fd);
    }
  };

  /** Writes data to a fresh temporary file beside the entry; returns its name. */
  const writeTemp = async (entry: Entry, data: Buffer, mode: number, shown: string, field: string): Promise<string> => {
    const tmp = `${TMP_PREFIX}${randomBytes(8).toString('hex')}`;
    let fd: number;
    try {
      fd = openSync(fdPath(entry.dir, tmp), FS.O_WRONLY | FS.O_CREAT | FS.O_EXCL | FS.O_NOFOLLOW, mode);
    } catch (e) {
      throw fsError(e, field, shown);
    }
    try {
      fchmodSync(fd, mode); // exact mode whatever the umask
      await writeAll(fd, data);
      await fsyncAsync(fd);
    } catch (e) {
      closeSync(fd);
      removeQuietly(entry.dir, tmp);
      throw fsError(e, field, shown);
    }
    closeSync(fd);
    return tmp;
  };

  /** Resolves, checks and stages one write (nothing visible changes yet). The pool owns the directory. */
  const prepare = async (pool: DirPool, index: number, p: unknown, content: unknown, expected: unknown, createParents: boolean, created: string[], field: string): Promise<PreparedWrite> => {
    if (typeof content !== 'string') throw invalid(`${field}: content must be a string`, { field });
    if (content.length > FILE_LIMITS.contentChars) {
      throw invalid(`${field}: content has ${content.length} characters; the limit is ${FILE_LIMITS.contentChars}`, { field, limit: FILE_LIMITS.contentChars });
    }
    const exp = parseSha(expected, field);
    const shown = String(p);
    const entry = pool.adopt(c.resolve(p, { field, follow: true, create: createParents, created }));
    if (entry.name === '') throw precondition(`${field}: ${shown} is the workspace root, not a file`, { field, path: shown });
    if (entry.st) refuseNonRegular(entry.st, shown, field);
    if (!entry.st && exp) {
      throw conflict(`${field}: ${shown} does not exist, but expectedSha256 was given; nothing was written`, { field, path: shown, expectedSha256: exp, currentSha256: null });
    }
    const mode = entry.st ? entry.st.mode & 0o7777 : DEFAULT_FILE_MODE;
    const data = Buffer.from(content, 'utf8');
    const tmp = await writeTemp(entry, data, mode, shown, field);
    return { index, shown, entry, tmp, expected: exp, created: !entry.st, size: data.length, sha256: sha256(data), mode };
  };

  /** The compare of a compare-and-swap, right before the rename. */
  const check = async (w: PreparedWrite, field: string): Promise<void> => {
    if (!w.expected) return;
    const current = await currentHash(w.entry, w.shown, field);
    if (current !== w.expected) {
      throw conflict(
        current === null
          ? `${field}: ${w.shown} no longer exists; expectedSha256 ${w.expected} does not match; nothing was written`
          : `${field}: ${w.shown} has SHA-256 ${current}, not the expected ${w.expected}; nothing was written (read it again and retry)`,
        { field, path: w.shown, expectedSha256: w.expected, currentSha256: current },
      );
    }
  };

  const commit = (w: PreparedWrite, field: string): void => {
    try {
      renameSync(fdPath(w.entry.dir, w.tmp), fdPath(w.entry.dir, w.entry.name));
    } catch (e) {
      throw fsError(e, field, w.shown);
    }
  };

  const discard = (w: PreparedWrite): void => {
    removeQuietly(w.entry.dir, w.tmp);
  };

  const undoCreated = (created: string[]): void => {
    for (const rel of [...created].reverse()) {
      const segs = rel.split('/');
      try {
        const parent = c.openDir(segs.slice(0, -1), rel);
        try {
          rmdirSync(fdPath(parent.fd, segs[segs.length - 1]!));
        } finally {
          closeSync(parent.fd);
        }
      } catch {
        // not empty any more, or gone: leave it
      }
    }
  };

  const writeResult = (w: PreparedWrite) => ({
    path: w.shown,
    realPath: w.entry.rel,
    sha256: w.sha256,
    size: w.size,
    created: w.created,
    mode: modeString(w.mode),
  });

  const methods: MethodTable = {
    'fs.list': (params) => {
      const p = obj(params);
      const limit = intParam(p.limit, 'limit', 1, FILE_LIMITS.listPage, 100);
      const shown = String(p.path ?? '.');
      const segs = c.segments(p.path ?? '.');
      const dir = c.openDir(segs, shown);
      try {
        const st = fstatSync(dir.fd);
        if (!st.isDirectory()) throw precondition(`path: ${shown} is not a directory`, { path: shown });
        let names: string[];
        try {
          names = readdirSync(fdPath(dir.fd));
        } catch (e) {
          throw fsError(e, 'path', shown);
        }
        names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
        let start = 0;
        if (typeof p.after === 'string') {
          let lo = 0;
          let hi = names.length;
          while (lo < hi) {
            const mid = (lo + hi) >> 1;
            if (names[mid]! <= p.after) lo = mid + 1;
            else hi = mid;
          }
          start = lo;
        } else if (p.index !== undefined) {
          start = intParam(p.index, 'index', 0, Number.MAX_SAFE_INTEGER, 0);
        }
        const entries: Array<Record<string, unknown>> = [];
        let i = start;
        for (; i < names.length && entries.length < limit; i++) {
          const name = names[i]!;
          let est: Stats;
          try {
            est = lstatSync(fdPath(dir.fd, name));
          } catch {
            continue; // removed while listing
          }
          const type = kindOf(est);
          const entry: Record<string, unknown> = {
            name,
            path: joinRel(dir.rel, name),
            type,
            size: est.size,
            mode: modeString(est.mode),
            mtime: est.mtime.toISOString(),
          };
          if (type === 'symlink') {
            try {
              entry.linkTarget = readlinkSync(fdPath(dir.fd, name));
            } catch {
              // gone
            }
          }
          entries.push(entry);
        }
        return { path: dir.rel, entries, total: names.length, nextIndex: i, last: entries.length > 0 ? names[i - 1] : (p.after ?? null), hasMore: i < names.length };
      } finally {
        closeSync(dir.fd);
      }
    },

    'fs.read': async (params) => {
      const p = obj(params);
      const offset = intParam(p.offset, 'offset', 0, Number.MAX_SAFE_INTEGER, 0);
      const limit = intParam(p.limit, 'limit', 1, FILE_LIMITS.readBytes, 65536);
      const expect = p.expectSha256Prefix;
      const shown = String(p.path);
      const f = c.openFile(p.path);
      try {
        const size = Number(f.st.size);
        let sha = hashes.get(f.st);
        if (!sha) {
          sha = (await hashFd(f.fd)).sha256;
          hashes.set(f.st, sha);
        }
        if (typeof expect === 'string' && !sha.startsWith(expect)) {
          throw conflict(`path: ${shown} changed since the cursor was issued (its SHA-256 is now ${sha}); read it again from offset 0`, { path: shown, currentSha256: sha });
        }
        if (offset > size) throw invalid(`offset: ${offset} is beyond the end of ${shown} (${size} bytes)`, { field: 'offset', path: shown, size });
        let buf = await readRange(f.fd, offset, Math.min(limit, size - offset));
        let end = offset + buf.length;
        if (end < size) {
          const cut = utf8Boundary(buf);
          if (cut > 0 && cut < buf.length && buf.indexOf(0) === -1 && isUtf8(buf.subarray(0, cut))) {
            buf = buf.subarray(0, cut);
            end = offset + cut;
          }
        }
        const { encoding, content } = encodeChunk(buf);
        return {
          path: shown,
          realPath: f.rel,
          size,
          sha256: sha,
          mode: modeString(Number(f.st.mode)),
          offset,
          length: buf.length,
          encoding,
          content,
          eof: end >= size,
          nextOffset: end,
        };
      } finally {
        closeSync(f.fd);
      }
    },

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

    'fs.patch': (params) =>
      exclusive(async () => {
        const p = obj(params);
        const oldText = p.oldText;
        const newText = p.newText;
        if (typeof oldText !== 'string' || typeof newText !== 'string') throw invalid('oldText and newText must be strings');
        if (oldText.length === 0) throw invalid('oldText must not be empty: give the exact text to replace', { field: 'oldText' });
        for (const [k, v] of [['oldText', oldText], ['newText', newText]] as const) {
          if (v.length > FILE_LIMITS.patchChars) throw invalid(`${k} has ${v.length} characters; the limit is ${FILE_LIMITS.patchChars}`, { field: k, limit: FILE_LIMITS.patchChars });
        }
        const exp = parseSha(p.expectedSha256, 'expectedSha256');
        const shown = String(p.path);
        const f = c.openFile(p.path);
        let data: Buffer;
        try {
          const size = Number(f.st.size);
          if (size > FILE_LIMITS.patchFileBytes) {
            throw precondition(`path: ${shown} has ${size} bytes; files_apply_patch edits files up to ${FILE_LIMITS.patchFileBytes} bytes (use files_write or a command)`, { path: shown, size });
          }
          data = await readRange(f.fd, 0, size);
          const after = fstatSync(f.fd, { bigint: true });
          if (after.size !== f.st.size || after.mtimeNs !== f.st.mtimeNs) throw conflict(`path: ${shown} changed while it was read; retry`, { path: shown });
        } finally {
          closeSync(f.fd);
        }
        const before = sha256(data);
        if (exp && exp !== before) {
          throw conflict(`path: ${shown} has SHA-256 ${before}, not the expected ${exp}; nothing was changed (read it again and retry)`, { path: shown, expectedSha256: exp, currentSha256: before });
        }
        const needle = Buffer.from(oldText, 'utf8');
        const found = occurrences(data, needle, FILE_LIMITS.patchLocations);
        if (found.count !== 1) throw patchMismatch(shown, data, oldText, found);
        const at = found.locations[0]!;
        const next = Buffer.concat([data.subarray(0, at.offset), Buffer.from(newText, 'utf8'), data.subarray(at.offset + needle.length)]);
        const pool = new DirPool();
        const entry = pool.adopt(c.resolve(f.rel, { follow: true }));
        let w: PreparedWrite | undefined;
        try {
          if (!entry.st) throw conflict(`path: ${shown} was removed while it was patched`, { path: shown });
          const mode = entry.st.mode & 0o7777;
          const tmp = await writeTemp(entry, next, mode, shown, 'path');
          // Compare against what was read: a change by anyone else in between is a CONFLICT.
          w = { index: 0, shown, entry, tmp, expected: before, created: false, size: next.length, sha256: sha256(next), mode };
          await check(w, 'path');
          commit(w, 'path');
        } catch (e) {
          if (w) discard(w);
          pool.closeAll(false);
          throw e;
        }
        pool.closeAll(true);
        changed([entry.rel]);
        return { ...writeResult(w), previousSha256: before, replacements: 1, line: at.line, column: at.column };
      }),

    'fs.delete': (params) =>
      exclusive(async () => {
        const p = obj(params);
        const shown = String(p.path);
        const exp = parseSha(p.expectedSha256, 'expectedSha256');
        const recursive = p.recursive === true;
        const e = c.resolve(p.path, { follow: false });
        try {
          if (e.name === '') throw denied(`path: ${shown} is the workspace root, which cannot be deleted`, { path: shown });
          if (!e.st) throw notFound(`path: ${shown} does not exist`, { path: shown });
          const type = kindOf(e.st);
          let removed = 1;
          if (type === 'directory') {
            if (exp) throw invalid(`expectedSha256: ${shown} is a directory; expectedSha256 applies to files only`, { field: 'expectedSha256', path: shown });
            if (recursive) {
              const sub = openSync(fdPath(e.dir, e.name), O_DIR_NOFOLLOW);
              try {
                removed += removeTree(sub, shown);
              } finally {
                closeSync(sub);
              }
            }
            try {
              rmdirSync(fdPath(e.dir, e.name));
            } catch (err) {
              if (errno(err) === 'ENOTEMPTY' || errno(err) === 'EEXIST') {
                throw precondition(`path: ${shown} is a directory that is not empty; pass recursive true to delete it and everything under it`, { path: shown });
              }
              throw fsError(err, 'path', shown);
            }
          } else {
            if (exp) {
              if (type !== 'file') throw invalid(`expectedSha256: ${shown} is a ${type}; expectedSha256 applies to regular files only`, { field: 'expectedSha256', path: shown });
              const current = await currentHash(e, shown, 'path');
              if (current !== exp) {
                throw conflict(`path: ${shown} has SHA-256 ${current}, not the expected ${exp}; nothing was deleted`, { path: shown, expectedSha256: exp, currentSha256: current });
              }
            }
            try {
              unlinkSync(fdPath(e.dir, e.name));
            } catch (err) {
              throw fsError(err, 'path', shown);
            }
          }
          changed([e.rel]);
          return { path: shown, realPath: e.rel, type, deleted: true, removedEntries: removed };
        } finally {
          closeSync(e.dir);
        }
      }),

    'fs.move': (params) =>
      exclusive(async () => {
        const p = obj(params);
        const overwrite = p.overwrite === true;
        const srcShown = String(p.source);
        const dstShown = String(p.destination);
        const src = c.resolve(p.source, { field: 'source', follow: false });
        let dst: Entry | undefined;
        const created: string[] = [];
        try {
          if (src.name === '') throw denied(`source: ${srcShown} is the workspace root, which cannot be moved`, { field: 'source', path: srcShown });
          if (!src.st) throw notFound(`source: ${srcShown} does not exist`, { field: 'source', path: srcShown });
          dst = c.resolve(p.destination, { field: 'destination', follow: false, create: true, created });
          if (dst.name === '') throw precondition(`destination: ${dstShown} is the workspace root`, { field: 'destination', path: dstShown });
          if (dst.rel === src.rel) throw invalid(`destination: ${dstShown} is the same as the source`, { field: 'destination', path: dstShown });
          const type = kindOf(src.st);
          const from = fdPath(src.dir, src.name);
          const to = fdPath(dst.dir, dst.name);
          const exists = (): DaemonError => conflict(`destination: ${dstShown} already exists; pass overwrite true to replace it`, { field: 'destination', path: dstShown });
          if (dst.st && !overwrite) throw exists();
          if (dst.st && overwrite) {
            const dtype = kindOf(dst.st);
            if (dtype === 'directory' && type !== 'directory') throw precondition(`destination: ${dstShown} is a directory; a ${type} cannot replace it`, { field: 'destination', path: dstShown });
            if (dtype !== 'directory' && type === 'directory') throw precondition(`destination: ${dstShown} is a ${dtype}; a directory can replace only an empty directory`, { field: 'destination', path: dstShown });
          }
          try {
            if (!overwrite && type !== 'directory') {
              // No-replace without a window: link fails when the destination appeared meanwhile.
              let linked = false;
              try {
                linkSync(from, to);
                linked = true;
              } catch (err) {
                if (errno(err) === 'EEXIST') throw exists();
                if (errno(err) !== 'EPERM' && errno(err) !== 'EXDEV' && errno(err) !== 'EMLINK') throw err;
              }
              if (linked) unlinkSync(from);
              else renameSync(from, to);
            } else {
              renameSync(from, to);
            }
          } catch (err) {
            if (err instanceof DaemonError) throw err;
            if (errno(err) === 'EINVAL') throw invalid(`destination: ${dstShown} is inside ${srcShown}; a directory cannot move into itself`, { field: 'destination', path: dstShown });
            if (errno(err) === 'ENOTEMPTY' || errno(err) === 'EEXIST') throw precondition(`destination: ${dstShown} is a directory that is not empty`, { field: 'destination', path: dstShown });
            throw fsError(err, 'destination', dstShown);
          }
          changed([src.rel, dst.rel]);
          return { source: srcShown, destination: dstShown, realSource: src.rel, realDestination: dst.rel, type, overwritten: dst.st !== undefined, moved: true };
        } catch (e) {
          if (dst) {
            closeSync(dst.dir);
            dst = undefined;
          }
          undoCreated(created);
          throw e;
        } finally {
          closeSync(src.dir);
          if (dst) closeSync(dst.dir);
        }
      }),

    'fs.mkdir': (params) =>
      exclusive(async () => {
        const p = obj(params);
        const shown = String(p.path);
        const recursive = p.recursive !== false;
        const segs = c.segments(p.path);
        if (segs.length === 0) return { path: shown, realPath: '.', created: false, createdDirectories: [] };
        if (recursive) {
          const created: string[] = [];
          const d = c.openDir(segs, shown, { create: true, created });
          closeSync(d.fd);
          if (created.length) changed(created);
          return { path: shown, realPath: d.rel, created: created.length > 0, createdDirectories: created };
        }
        const parent = c.openDir(segs.slice(0, -1), shown);
        const name = segs[segs.length - 1]!;
        try {
          try {
            mkdirSync(fdPath(parent.fd, name), DEFAULT_DIR_MODE);
          } catch (err) {
            if (errno(err) === 'EEXIST') {
              const st = lstatSync(fdPath(parent.fd, name));
              throw precondition(`path: ${shown} already exists (a ${kindOf(st)}); with recursive true an existing directory is not an error`, { path: shown, type: kindOf(st) });
            }
            throw fsError(err, 'path', shown);
          }
          const d = openSync(fdPath(parent.fd, name), O_DIR_NOFOLLOW);
          fchmodSync(d, DEFAULT_DIR_MODE);
          closeSync(d);
          const rel = joinRel(parent.rel, name);
          changed([rel]);
          return { path: shown, realPath: rel, created: true, createdDirectories: [rel] };
        } finally {
          closeSync(parent.fd);
        }
      }),
  };

  /** All or nothing: stage every file, check every hash, then rename them all. */
  async function batchAtomic(files: unknown[], createParents: boolean): Promise<Record<string, unknown>> {
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
  async function batchEach(files: unknown[], createParents: boolean): Promise<Record<string, unknown>> {
    const results: Array<Record<string, unknown>> = [];
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

  return { methods, confinement: c };
}

/** Removes everything under an open directory without following any symlink; returns the count. */
function removeTree(dirFd: number, shown: string, depth = 0): number {
  if (depth > 512) throw precondition(`path: ${shown} is nested too deeply to delete`, { path: shown });
  let count = 0;
  for (const name of readdirSync(fdPath(dirFd))) {
    const here = fdPath(dirFd, name);
    let st: Stats;
    try {
      st = lstatSync(here);
    } catch {
      continue;
    }
    if (st.isDirectory()) {
      let sub: number;
      try {
        sub = openSync(here, O_DIR_NOFOLLOW); // a directory swapped for a symlink fails here
      } catch (e) {
        throw fsError(e, 'path', shown);
      }
      try {
        count += removeTree(sub, shown, depth + 1);
      } finally {
        closeSync(sub);
      }
      rmdirSync(here);
    } else {
      unlinkSync(here); // never follows a symlink
    }
    count++;
  }
  return count;
}

function removeQuietly(dirFd: number, name: string): void {
  try {
    unlinkSync(fdPath(dirFd, name));
  } catch {
    // already gone
  }
}

interface Found {
  count: number;
  locations: Array<{ offset: number; line: number; column: number }>;
}

/** Every occurrence (overlapping ones too), with line and column of the first few. */
function occurrences(hay: Buffer, needle: Buffer, keep: number): Found {
  const locations: Found['locations'] = [];
  let count = 0;
  let line = 1;
  let lineStart = 0;
  let scanned = 0;
  for (let at = hay.indexOf(needle); at !== -1; at = hay.indexOf(needle, at + 1)) {
    count++;
    if (locations.length < keep) {
      for (let nl = hay.indexOf(10, scanned); nl !== -1 && nl < at; nl = hay.indexOf(10, nl + 1)) {
        line++;
        lineStart = nl + 1;
      }
      scanned = at;
      locations.push({ offset: at, line, column: hay.subarray(lineStart, at).toString('utf8').length + 1 });
    }
  }
  return { count, locations };
}

function patchMismatch(shown: string, data: Buffer, oldText: string, found: Found): DaemonError {
  if (found.count === 0) {
    const hints: string[] = [];
    if (!oldText.includes('\r\n') && oldText.includes('\n') && data.includes('\r\n')) {
      const crlf = occurrences(data, Buffer.from(oldText.replace(/\n/g, '\r\n')), 1).count;
      if (crlf > 0) hints.push(`the file uses CRLF line endings and oldText with CRLF occurs ${crlf} time${crlf === 1 ? '' : 's'}`);
    }
    const trimmed = oldText.trim();
    if (hints.length === 0 && trimmed.length > 0 && trimmed !== oldText) {
      const t = occurrences(data, Buffer.from(trimmed), 1).count;
      if (t > 0) hints.push(`oldText without its leading and trailing whitespace occurs ${t} time${t === 1 ? '' : 's'}`);
    }
    return new DaemonError('FAILED_PRECONDITION', `oldText occurs 0 times in ${shown}; it must occur exactly once (copy it exactly from files_read${hints.length ? `; note: ${hints.join('; ')}` : ''}); nothing was changed`, {
      path: shown,
      matches: 0,
      hints,
    });
  }
  const where = found.locations.map((l) => `${l.line}:${l.column}`);
  return new DaemonError(
    'FAILED_PRECONDITION',
    `oldText occurs ${found.count} times in ${shown} (at lines ${where.join(', ')}${found.count > where.length ? ', ...' : ''}); it must occur exactly once: include more surrounding text to make it unique; nothing was changed`,
    { path: shown, matches: found.count, locations: found.locations.map(({ line, column }) => ({ line, column })) },
  );
}

function parseSha(v: unknown, field: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string' || !/^[0-9a-fA-F]{64}$/.test(v)) throw invalid(`${field} must be 64 hexadecimal characters`, { field });
  return v.toLowerCase();
}

function obj(v: unknown, what = 'params'): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid(`${what} must be an object`);
  return v as Record<string, unknown>;
}

function intParam(v: unknown, name: string, min: number, max: number, def: number): number {
  if (v === undefined || v === null) return def;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw invalid(`${name} must be an integer from ${min} to ${max}`, { field: name });
  return v;
}
