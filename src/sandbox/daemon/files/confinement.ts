/**
 * The confinement every file and search method goes through (the rules are in ./index.ts and
 * docs/files.md): paths validated up front, walked one component at a time from an open descriptor
 * of the root with O_NOFOLLOW (openat-style), symlinks followed only when their target stays inside.
 */
import { closeSync, fchmodSync, fstatSync, lstatSync, mkdirSync, openSync, readlinkSync, realpathSync, type BigIntStats, type Stats } from 'node:fs';
import { DaemonError } from '../protocol.js';
import { DEFAULT_DIR_MODE, FILE_LIMITS, LONE_SURROGATE, O_DIR, O_DIR_NOFOLLOW, O_READ, denied, errno, invalid, kindOf, notFound, precondition } from './common.js';

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

export function refuseNonRegular(st: Stats | BigIntStats, shown: string, field: string): void {
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
