/**
 * Descriptor walks over the runner's own host directories that never follow a symlink at any step
 * (removal, opening), and whether a directory is a mount point. Driver-neutral: the runner keeps
 * its own trees (package releases and builds, checkpoints) on its host whichever executor runs the
 * sandboxes; the bubblewrap driver's root directories (rootdir.ts) use the same walks.
 */
import { constants } from 'node:fs';
import { open, readdir, readFile, realpath, rmdir, unlink, type FileHandle } from 'node:fs/promises';
import { ServiceError } from '../core/errors.js';

const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;

/** The path that names `name` inside the directory held by `fh` (openat semantics). */
export function at(fh: FileHandle, name: string): string {
  if (name === '' || name === '.' || name === '..' || name.includes('/')) throw new ServiceError('INTERNAL', `bad entry name in a descriptor walk: ${JSON.stringify(name)}`);
  return `/proc/self/fd/${fh.fd}/${name}`;
}

export function gone(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ELOOP' || code === 'ENOTDIR' || code === 'EXDEV';
}

/** Opens a directory by absolute host path, refusing a symlink in the last component. */
export async function openDirNoFollow(p: string): Promise<FileHandle> {
  return open(p, DIR_FLAGS);
}

/** Opens the directory `name` inside `parent`, never following a symlink; null when it is not a directory (any more). */
export async function openDirAt(parent: FileHandle, name: string): Promise<FileHandle | null> {
  try {
    return await open(at(parent, name), DIR_FLAGS);
  } catch (err) {
    if (gone(err)) return null;
    throw err;
  }
}

/** Removes every entry below the directory held by `dir`; descriptor walk, unlinks symlinks, never follows them. */
export async function emptyDirAt(dir: FileHandle, dev: number): Promise<void> {
  for (const entry of await readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true })) {
    await removeAt(dir, entry.name, dev);
  }
}

async function removeAt(dir: FileHandle, name: string, dev: number, retries = 0): Promise<void> {
  // Something that keeps changing the entry (only a live workspace process could) is not chased forever.
  if (retries > 50) throw new ServiceError('CONFLICT', `an entry kept changing while it was removed: ${name}`);
  const p = at(dir, name);
  try {
    await unlink(p);
    return;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return;
    if (code !== 'EISDIR' && code !== 'EPERM') throw err;
  }
  const fh = await openDirAt(dir, name);
  if (!fh) return removeAt(dir, name, dev, retries + 1); // changed kind meanwhile: try again as what it is now
  try {
    const st = await fh.stat();
    if (st.dev !== dev) return; // a mount point: never descended into
    await emptyDirAt(fh, dev);
  } finally {
    await fh.close();
  }
  try {
    await rmdir(p);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOTEMPTY' || code === 'EEXIST') return removeAt(dir, name, dev, retries + 1); // refilled meanwhile
    if (code !== 'ENOENT') throw err;
  }
}

/** Removes a host directory tree by descriptor walk (rm -rf that never follows a symlink at any step). */
export async function removeTreeNoFollow(dir: string): Promise<void> {
  let fh: FileHandle;
  try {
    fh = await openDirNoFollow(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return;
    if (code === 'ELOOP' || code === 'ENOTDIR') {
      await unlink(dir);
      return;
    }
    throw err;
  }
  try {
    await emptyDirAt(fh, (await fh.stat()).dev);
  } finally {
    await fh.close();
  }
  await rmdir(dir).catch((err) => {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  });
}

/** mountinfo escapes space, tab, newline and backslash in paths as octal. */
export function mountinfoPath(path: string): string {
  return path.replace(/[ \t\n\\]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`);
}

/** Whether dir is a mount point: read from /proc/self/mountinfo (no process spawned). */
export async function isMountPoint(dir: string): Promise<boolean> {
  let real: string;
  try {
    real = await realpath(dir);
  } catch {
    return false;
  }
  const target = mountinfoPath(real);
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  return text.split('\n').some((line) => line.split(' ')[4] === target);
}
