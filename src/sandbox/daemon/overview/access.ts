/**
 * Safe file access under the repository root, by descriptor: the same confinement as the file
 * methods (../files/confinement.ts). Every path is walked one component at a time from an open
 * descriptor of the root with O_NOFOLLOW (openat-style); a symlink on the way is followed only when
 * its target stays under the root, and what was opened is verified again through /proc/self/fd.
 * Nothing here resolves a path string from the root, so swapping a directory for a symlink while
 * the overview runs reads nothing outside.
 */
import { closeSync, fstatSync, openSync, read, type Dir, type Dirent } from 'node:fs';
import { opendir } from 'node:fs/promises';
import { promisify } from 'node:util';
import { O_DIR_NOFOLLOW } from '../files/common.js';
import { fdPath } from '../files/confinement.js';
import { OVERVIEW_LIMITS, type Ctx } from './rules.js';

const readAsync = promisify(read);

/**
 * A directory's entries, read in batches; an unreadable directory or entry ends the listing
 * quietly, and the handle always closes. `dir` is an open directory descriptor.
 */
export async function* dirEntries(dir: number, bufferSize: number): AsyncGenerator<Dirent> {
  let handle: Dir;
  try {
    handle = await opendir(fdPath(dir), { bufferSize });
  } catch {
    return;
  }
  try {
    for (;;) {
      const ent = await handle.read().catch(() => null);
      if (ent === null) return;
      yield ent;
    }
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/** A directory opened under the root: its descriptor (the caller closes it) and real root-relative path ('' for the root). */
export interface OpenedDir {
  fd: number;
  real: string;
}

/** The segments of a root-relative path ('' is the root). */
const segmentsOf = (ctx: Ctx, rel: string): string[] => (rel === '' ? [] : ctx.c.segments(rel));

/** Opens rel as a directory when it is one under the root (symlinks followed only inside); null otherwise. */
export function openDirInside(ctx: Ctx, rel: string): OpenedDir | null {
  try {
    const d = ctx.c.openDir(segmentsOf(ctx, rel), rel);
    return { fd: d.fd, real: d.rel === '.' ? '' : d.rel };
  } catch {
    return null;
  }
}

/** Opens rel read-only when it resolves under the root to a regular file; null otherwise (the caller closes fd). */
export function openInside(ctx: Ctx, rel: string): { fd: number; size: number } | null {
  try {
    const f = ctx.c.openFile(rel);
    return { fd: f.fd, size: Number(f.st.size) };
  } catch {
    return null;
  }
}

/** lstat of rel's final component (its parent walked by descriptor), or null when absent or outside. */
export function lstatInside(ctx: Ctx, rel: string): ReturnType<typeof fstatSync> | null {
  try {
    const e = ctx.c.resolve(rel, { follow: false });
    closeSync(e.dir);
    return e.st ?? null;
  } catch {
    return null;
  }
}

export async function isFileInside(ctx: Ctx, rel: string): Promise<boolean> {
  const f = openInside(ctx, rel);
  if (!f) return false;
  closeSync(f.fd);
  return true;
}

export async function isDirInside(ctx: Ctx, rel: string): Promise<boolean> {
  const d = openDirInside(ctx, rel);
  if (!d) return false;
  closeSync(d.fd);
  return true;
}

/**
 * Opens the directories of one walk by descriptor, each from its parent's with O_NOFOLLOW, keeping
 * the last few open: a breadth-first walk opens each directory with one openat from its (usually
 * still open) parent. A descriptor returned stays valid until the next open() or close().
 */
export class DirChain {
  private readonly open = new Map<string, number>();

  constructor(
    private readonly rootFd: number,
    private readonly keep = 32,
  ) {}

  /** The directory at a root-relative path ('' is the root) whose every component is a real directory; null otherwise. */
  get(rel: string): number | null {
    if (rel === '') return this.rootFd;
    const have = this.open.get(rel);
    if (have !== undefined) {
      this.open.delete(rel);
      this.open.set(rel, have);
      return have;
    }
    const slash = rel.lastIndexOf('/');
    const parent = this.get(slash < 0 ? '' : rel.slice(0, slash));
    if (parent === null) return null;
    let fd: number;
    try {
      fd = openSync(fdPath(parent, rel.slice(slash + 1)), O_DIR_NOFOLLOW);
    } catch {
      return null; // gone, not a directory, or replaced by a symlink
    }
    this.open.set(rel, fd);
    if (this.open.size > this.keep) {
      const [oldest, ofd] = this.open.entries().next().value!;
      this.open.delete(oldest);
      closeSync(ofd);
    }
    return fd;
  }

  close(): void {
    for (const fd of this.open.values()) closeSync(fd);
    this.open.clear();
  }
}

/** Reads up to cap bytes from the start of an open file. */
export async function readHead(fd: number, cap: number): Promise<Buffer> {
  const buf = Buffer.alloc(cap);
  let filled = 0;
  while (filled < cap) {
    const { bytesRead } = await readAsync(fd, buf, filled, cap - filled, filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return buf.subarray(0, filled);
}

/** Reads into buf at a file position (for streaming a file through a hash). */
export async function readAt(fd: number, buf: Buffer, position: number): Promise<number> {
  return (await readAsync(fd, buf, 0, buf.length, position)).bytesRead;
}

/** First cap bytes of a regular file under the root as text, or null. */
export async function readText(ctx: Ctx, rel: string, cap = OVERVIEW_LIMITS.configReadBytes): Promise<string | null> {
  const f = openInside(ctx, rel);
  if (!f) return null;
  try {
    return (await readHead(f.fd, Math.min(cap, Math.max(f.size, 0) || cap))).toString('utf8');
  } catch {
    return null;
  } finally {
    closeSync(f.fd);
  }
}

/** Length of the longest prefix of buf that does not end inside a UTF-8 sequence. */
export function utf8Boundary(buf: Buffer, length: number): number {
  if (length <= 0) return 0;
  let i = length - 1;
  const stop = Math.max(0, length - 4);
  while (i > stop && (buf[i]! & 0xc0) === 0x80) i--;
  const lead = buf[i]!;
  const need = lead < 0x80 ? 1 : (lead & 0xe0) === 0xc0 ? 2 : (lead & 0xf0) === 0xe0 ? 3 : (lead & 0xf8) === 0xf0 ? 4 : 1;
  return i + need > length ? i : length;
}

/** The longest prefix of s whose UTF-8 encoding fits in max bytes, cut between characters. */
export function truncateUtf8(s: string, max: number): string {
  const buf = Buffer.from(s, 'utf8');
  if (buf.length <= max) return s;
  return buf.subarray(0, utf8Boundary(buf, max)).toString('utf8');
}

export const decoder = new TextDecoder('utf-8', { fatal: false });
