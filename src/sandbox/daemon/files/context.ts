/**
 * The state the file methods share (one per daemon): the confinement, the hash cache, the mutation
 * queue, the change listener; and the staging steps every write goes through (a temporary file
 * beside the target, fsynced, compared and renamed over it).
 */
import { randomBytes } from 'node:crypto';
import { closeSync, constants as FS, fchmodSync, fstatSync, fsync, openSync, renameSync, rmdirSync, unlinkSync } from 'node:fs';
import { DEFAULT_FILE_MODE, FILE_LIMITS, O_READ, TMP_PREFIX, conflict, denied, errno, invalid, modeString, parseSha, precondition } from './common.js';
import { Confinement, fdPath, fsError, parentRel, refuseNonRegular, type Entry } from './confinement.js';
import { HashCache, fsyncAsync, hashFd, sha256, writeAll } from './content.js';

export interface FileMethodOptions {
  root: string;
  /** Told the real root-relative paths that a method changed (the symbol index listens). */
  onChange?: (rels: string[]) => void;
}

export interface PreparedWrite {
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
export class DirPool {
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

export interface FileContext {
  c: Confinement;
  hashes: HashCache;
  /** Tells the listener which real root-relative paths changed (its failures are not the call's). */
  changed(rels: string[]): void;
  /**
   * Every method that changes files runs alone: a compare-and-swap is then tight against every
   * other tool call (other writers inside the workspace are a documented window of microseconds).
   */
  exclusive<T>(fn: () => Promise<T>): Promise<T>;
  staging: Staging;
}

export type Staging = ReturnType<typeof stagingOf>;

export function fileContext(opts: FileMethodOptions): FileContext {
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
  const fc: FileContext = { c, hashes, changed, exclusive, staging: undefined as unknown as Staging };
  fc.staging = stagingOf(c, hashes);
  return fc;
}

function stagingOf(c: Confinement, hashes: HashCache) {
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

  return { currentHash, writeTemp, prepare, check, commit, discard, undoCreated, writeResult };
}

export function removeQuietly(dirFd: number, name: string): void {
  try {
    unlinkSync(fdPath(dirFd, name));
  } catch {
    // already gone
  }
}
