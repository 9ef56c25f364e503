/**
 * Host-side handling of a sandbox's root directory (<dataDir>/workspaces/<id>/ with repo/, home/,
 * tmp/). The runner is root, and a workspace's processes (its long-lived sandbox, a short-lived
 * git or privileged sandbox) may be changing the tree at any moment, swapping directories for
 * symlinks to host paths. So nothing here resolves a path inside the tree by name:
 *
 * - every step is a descriptor walk: a directory is opened with O_DIRECTORY | O_NOFOLLOW relative
 *   to the descriptor of its parent (through /proc/self/fd/<fd>/<name>, which is openat(2) for
 *   node: the kernel resolves /proc/self/fd/<fd> to the very directory the descriptor holds, and
 *   the last component is never followed), then fstat/fchown/fchmod act on the descriptor;
 * - entries that are not directories are changed with lchown/unlink on /proc/self/fd/<fd>/<name>,
 *   which act on the entry itself (a symlink, never its target);
 * - an entry that changed kind or vanished between readdir and open is skipped (ELOOP, ENOTDIR,
 *   ENOENT): the walk never follows what it finds there, and never fails because of it;
 * - the walk stays on the tree's filesystem (st_dev) and never crosses a mount point.
 *
 * Root only ever re-owns to the sandbox uid and only below rootDir, and only when an entry is not
 * owned by that uid already (a new directory, or a tree made under another configured uid).
 */
import { constants } from 'node:fs';
import { chmod, lchown, lstat, mkdir, readdir, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { ServiceError } from '../core/errors.js';
import { at, gone, openDirAt, openDirNoFollow, removeTreeNoFollow } from './host-fs.js';

// The descriptor walks live in host-fs.ts (driver-neutral); re-exported for this driver's modules.
export { openDirNoFollow, removeTreeNoFollow };

export const ROOT_SUBDIRS = ['repo', 'home', 'tmp'] as const;

export interface SandboxIds {
  uid: number;
  gid: number;
}


/**
 * Makes rootDir and its repo/, home/, tmp/ exist and owned by the sandbox user (rootDir 0700,
 * tmp 1777). Deeper entries are re-owned (by descriptor walk) only when a subdirectory was not
 * the user's yet: a tree the sandbox wrote itself is never walked.
 */
export async function prepareRootDir(rootDir: string, ids: SandboxIds): Promise<void> {
  await mkdir(rootDir, { recursive: true });
  let root: FileHandle;
  try {
    root = await openDirNoFollow(rootDir);
  } catch (err) {
    if (gone(err)) throw new ServiceError('FAILED_PRECONDITION', `sandbox root is not a directory: ${rootDir}`);
    throw err;
  }
  try {
    const rootSt = await root.stat();
    for (const sub of ROOT_SUBDIRS) {
      try {
        await mkdir(at(root, sub), { mode: sub === 'tmp' ? 0o1777 : 0o755 });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const fh = await openDirAt(root, sub);
      if (!fh) throw new ServiceError('FAILED_PRECONDITION', `sandbox ${sub}/ is not a directory`, { path: path.join(rootDir, sub) });
      try {
        const st = await fh.stat();
        if (st.uid !== ids.uid || st.gid !== ids.gid) {
          await fh.chown(ids.uid, ids.gid);
          // Not the sandbox's yet: a fresh directory (empty) or a tree made under another uid.
          if (st.dev === rootSt.dev) await chownTreeAt(fh, ids, st.dev);
        }
        if (sub === 'tmp') await fh.chmod(0o1777);
      } finally {
        await fh.close();
      }
    }
    if (rootSt.uid !== ids.uid || rootSt.gid !== ids.gid) await root.chown(ids.uid, ids.gid);
    await root.chmod(0o700);
  } finally {
    await root.close();
  }
}

/** lchown every entry below the directory held by `dir` that is not owned by ids; descriptor walk, never follows symlinks. */
async function chownTreeAt(dir: FileHandle, ids: SandboxIds, dev: number): Promise<void> {
  for (const entry of await readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true })) {
    if (entry.isDirectory()) {
      const fh = await openDirAt(dir, entry.name);
      if (!fh) continue;
      try {
        const st = await fh.stat();
        if (st.dev !== dev) continue;
        if (st.uid !== ids.uid || st.gid !== ids.gid) await fh.chown(ids.uid, ids.gid);
        await chownTreeAt(fh, ids, dev);
      } finally {
        await fh.close();
      }
      continue;
    }
    try {
      const p = at(dir, entry.name);
      const st = await lstat(p);
      if (st.isDirectory() || st.dev !== dev) continue; // became a directory meanwhile: left as it is
      if (st.uid !== ids.uid || st.gid !== ids.gid) await lchown(p, ids.uid, ids.gid);
    } catch (err) {
      if (!gone(err)) throw err;
    }
  }
}

/** Exposed for tests and re-owning tools: the descriptor walk over the tree at `dir` (the top itself included). */
export async function chownTree(dir: string, ids: SandboxIds): Promise<void> {
  const fh = await openDirNoFollow(dir);
  try {
    const st = await fh.stat();
    if (st.uid !== ids.uid || st.gid !== ids.gid) await fh.chown(ids.uid, ids.gid);
    await chownTreeAt(fh, ids, st.dev);
  } finally {
    await fh.close();
  }
}


/**
 * Once the daemon listens: its socket directory (bound at /run/atelier inside) and the socket
 * become root's (directory 0755, socket 0600), so workspace processes (the sandbox uid) can
 * neither connect to the socket nor add, replace or remove anything there; root (the runner)
 * still connects. Descriptor-based; refuses anything but a socket.
 */
export async function lockDaemonSocket(sockDir: string, name: string): Promise<void> {
  const fh = await openDirNoFollow(sockDir);
  try {
    await fh.chown(0, 0);
    await fh.chmod(0o755);
    const p = at(fh, name);
    const st = await lstat(p);
    if (!st.isSocket()) throw new ServiceError('FAILED_PRECONDITION', 'the sandbox daemon socket is not a socket', { path: path.join(sockDir, name) });
    await lchown(p, 0, 0);
    // No lchmod on Linux: chmod follows, but the entry was checked as a socket and only root can change the directory now.
    await chmod(p, 0o600);
  } finally {
    await fh.close();
  }
}

/**
 * Throws FAILED_PRECONDITION unless the sandbox user can traverse every directory above `target`:
 * bubblewrap resolves its bind sources as that user. (The service creates <dataDir>/workspaces
 * with mode 0711 for this reason.)
 */
export async function assertTraversable(target: string, ids: SandboxIds): Promise<void> {
  let dir = path.dirname(path.resolve(target));
  for (;;) {
    const st = await stat(dir);
    const ok =
      (st.mode & constants.S_IXOTH) !== 0 ||
      (st.uid === ids.uid && (st.mode & constants.S_IXUSR) !== 0) ||
      (st.gid === ids.gid && (st.mode & constants.S_IXGRP) !== 0);
    if (!ok) {
      throw new ServiceError(
        'FAILED_PRECONDITION',
        `sandbox user ${ids.uid} cannot traverse ${dir} (needs o+x, e.g. mode 0711)`,
        { path: dir },
      );
    }
    const parent = path.dirname(dir);
    if (parent === dir) return;
    dir = parent;
  }
}

/**
 * Removes a sandbox's root directory. Root removes it by descriptor walk (removeTreeNoFollow), so
 * whatever a process of the workspace might still do to the tree, no symlink is ever followed and
 * nothing outside rootDir is touched. (On the workspace's own filesystem the caller unmounts and
 * deletes the image first, and nothing is left to walk.)
 */
export async function removeSandboxRoot(rootDir: string, _ids?: SandboxIds): Promise<void> {
  await removeTreeNoFollow(rootDir);
}
