/**
 * Host-side handling of a sandbox's root directory (<dataDir>/workspaces/<id>/ with repo/, home/,
 * tmp/). The runner is root; everything here avoids following symlinks that sandbox processes
 * could have planted, and runs only while no process of that sandbox is alive.
 */
import { spawn } from 'node:child_process';
import { constants } from 'node:fs';
import { chmod, lchown, lstat, mkdir, readdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { ServiceError } from '../core/errors.js';

export const ROOT_SUBDIRS = ['repo', 'home', 'tmp'] as const;

export interface SandboxIds {
  uid: number;
  gid: number;
}

/**
 * Makes rootDir and its repo/, home/, tmp/ exist and gives the whole tree to the sandbox user
 * (lchown: symlinks themselves are re-owned, never their targets). Entries already owned by the
 * user are skipped, so a tree the sandbox wrote itself costs one lstat per entry.
 */
export async function prepareRootDir(rootDir: string, ids: SandboxIds): Promise<void> {
  await mkdir(rootDir, { recursive: true });
  const top = await lstat(rootDir);
  if (!top.isDirectory()) throw new ServiceError('FAILED_PRECONDITION', `sandbox root is not a directory: ${rootDir}`);
  for (const sub of ROOT_SUBDIRS) {
    const dir = path.join(rootDir, sub);
    try {
      await mkdir(dir, { mode: sub === 'tmp' ? 0o1777 : 0o755 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      if (!(await lstat(dir)).isDirectory()) {
        throw new ServiceError('FAILED_PRECONDITION', `sandbox ${sub}/ is not a directory`, { path: dir });
      }
    }
  }
  await chownTree(rootDir, ids);
  await chmod(rootDir, 0o700);
  await chmod(path.join(rootDir, 'tmp'), 0o1777);
}

/** lchown every entry under (and including) dir that is not owned by ids yet; never follows symlinks. */
export async function chownTree(dir: string, ids: SandboxIds): Promise<void> {
  const st = await lstat(dir);
  if (st.uid !== ids.uid || st.gid !== ids.gid) await lchown(dir, ids.uid, ids.gid);
  if (!st.isDirectory()) return;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    await chownTree(path.join(dir, entry.name), ids);
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
 * Removes a sandbox's root directory once its sandbox is stopped. First `rm -rf` runs as the
 * sandbox user, so whatever a leftover process might do to the tree, the kernel confines the
 * deletion to what that user may delete; then root removes the rest (e.g. directories the user
 * made unwritable) with node's rm, which unlinks symlinks instead of following them.
 */
export async function removeSandboxRoot(rootDir: string, ids: SandboxIds, setprivPath = '/usr/bin/setpriv'): Promise<void> {
  try {
    await lstat(rootDir);
  } catch {
    return;
  }
  await new Promise<void>((resolve) => {
    const child = spawn(
      setprivPath,
      [`--reuid=${ids.uid}`, `--regid=${ids.gid}`, '--clear-groups', '--no-new-privs', '--inh-caps=-all', '--', 'rm', '-rf', '--one-file-system', '--', rootDir],
      { stdio: 'ignore', env: { PATH: '/usr/bin:/bin' } },
    );
    child.on('error', () => resolve());
    child.on('exit', () => resolve());
  });
  await rm(rootDir, { recursive: true, force: true });
}
