/**
 * The package builder's tree, taken by descriptor (issue #31 item 3; docs/packages.md "How root
 * takes the built tree").
 *
 * The builder sandbox owns `work/` and may leave anything there, `work/node_modules` (or
 * `work/site`) included: a symbolic link to a host directory, a fifo, a directory swapped while
 * root reads it. Root therefore never resolves a path in it by name, never changes an inode of it
 * (no chown, chmod or rename of the builder's files) and never crosses into another filesystem.
 * It copies: the tree's top is opened O_DIRECTORY|O_NOFOLLOW relative to a descriptor of `work/`
 * (anything but a directory is refused), every entry below is read through descriptors opened
 * O_NOFOLLOW relative to its directory's descriptor (`/proc/self/fd/<dir>/<name>`, the openat of
 * Node), checked with fstat (kind, filesystem, inode) and copied into a new tree that root makes
 * itself in a directory only root can write: directories 0555, files 0444 or 0555, symbolic links
 * recreated as links (never followed), everything root's. Special files refuse the tree. The copy
 * hashes every file as it reads it, so the release's file list describes the bytes copied.
 */
import { createHash } from 'node:crypto';
import { constants as C } from 'node:fs';
import { chmod, lstat, mkdir, open, readdir, readlink, symlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';

export interface TreeEntry {
  path: string;
  type: 'file' | 'dir' | 'symlink';
  mode: number;
  size?: number;
  sha256?: string;
  target?: string;
}

/** The tree cannot become a release; the message names the entry and why. */
export class TreeRefusal extends Error {}

const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;
const FILE_FLAGS = C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK | C.O_NOCTTY;
const CHUNK = 1 << 20;

const at = (dir: FileHandle, name: string): string => `/proc/self/fd/${dir.fd}/${name}`;

/**
 * Copies the directory `name` in `parent` into `dest` (which must not exist; its parent is
 * root's and private) as described above, and returns every entry, sorted by name depth-first
 * (a directory before what it holds). `parent` itself must be a path no sandbox can change (its
 * own parents root's); it is opened O_NOFOLLOW too.
 */
export async function copyTreeNoFollow(parent: string, name: string, dest: string): Promise<TreeEntry[]> {
  const parentDir = await open(parent, DIR_FLAGS);
  try {
    let top: FileHandle;
    try {
      top = await open(at(parentDir, name), DIR_FLAGS);
    } catch (e) {
      throw await refusalOf(e, parentDir, name, name, 'the top of the installed tree');
    }
    try {
      const st = await top.stat();
      if (!st.isDirectory()) throw new TreeRefusal(`${name}: the top of the installed tree is not a directory`);
      const out: TreeEntry[] = [];
      await mkdir(dest, { mode: 0o700 });
      await copyDirectory(top, st.dev, dest, '', out);
      await chmod(dest, 0o555);
      return out;
    } finally {
      await top.close();
    }
  } finally {
    await parentDir.close();
  }
}

async function copyDirectory(dir: FileHandle, dev: number, dest: string, rel: string, out: TreeEntry[]): Promise<void> {
  let names: string[];
  try {
    names = (await readdir(`/proc/self/fd/${dir.fd}`)).sort((a, b) => (a < b ? -1 : 1));
  } catch (e) {
    throw await refusalOf(e, null, '', rel || '.', 'a directory of the installed tree');
  }
  for (const name of names) {
    const path = rel ? `${rel}/${name}` : name;
    const to = join(dest, name);
    let st;
    try {
      st = await lstat(at(dir, name));
    } catch (e) {
      throw await refusalOf(e, null, '', path, 'an entry of the installed tree');
    }
    if (st.isSymbolicLink()) {
      let target: string;
      try {
        target = await readlink(at(dir, name));
      } catch (e) {
        throw await refusalOf(e, null, '', path, 'a symbolic link of the installed tree');
      }
      await symlink(target, to);
      out.push({ path, type: 'symlink', mode: 0o777, target });
    } else if (st.isDirectory()) {
      let child: FileHandle;
      try {
        child = await open(at(dir, name), DIR_FLAGS);
      } catch (e) {
        throw await refusalOf(e, dir, name, path, 'a directory of the installed tree');
      }
      try {
        const cst = await child.stat();
        if (!cst.isDirectory() || cst.ino !== st.ino) throw new TreeRefusal(`${path}: changed while the tree was being copied`);
        if (cst.dev !== dev) throw new TreeRefusal(`${path}: is on another filesystem than the installed tree`);
        out.push({ path, type: 'dir', mode: cst.mode & 0o777 });
        await mkdir(to, { mode: 0o700 });
        await copyDirectory(child, dev, to, path, out);
        await chmod(to, 0o555);
      } finally {
        await child.close();
      }
    } else if (st.isFile()) {
      let file: FileHandle;
      try {
        file = await open(at(dir, name), FILE_FLAGS);
      } catch (e) {
        throw await refusalOf(e, dir, name, path, 'a file of the installed tree');
      }
      try {
        const fst = await file.stat();
        if (!fst.isFile() || fst.ino !== st.ino) throw new TreeRefusal(`${path}: changed while the tree was being copied`);
        if (fst.dev !== dev) throw new TreeRefusal(`${path}: is on another filesystem than the installed tree`);
        const mode = fst.mode & 0o111 ? 0o555 : 0o444;
        const { size, sha256 } = await copyFile(file, to, mode);
        out.push({ path, type: 'file', mode, size, sha256 });
      } finally {
        await file.close();
      }
    } else {
      throw new TreeRefusal(`${path}: the install left a special file (not a file, directory or symlink)`);
    }
  }
}

/** Copies an open file into a new file `to` (created, never opened if it exists) with `mode`, hashing what it copies. */
async function copyFile(from: FileHandle, to: string, mode: number): Promise<{ size: number; sha256: string }> {
  const h = createHash('sha256');
  const buf = Buffer.allocUnsafe(CHUNK);
  let size = 0;
  const out = await open(to, C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, 0o600);
  try {
    for (;;) {
      const { bytesRead } = await from.read(buf, 0, CHUNK, null);
      if (bytesRead === 0) break;
      h.update(buf.subarray(0, bytesRead));
      let written = 0;
      while (written < bytesRead) written += (await out.write(buf, written, bytesRead - written)).bytesWritten;
      size += bytesRead;
    }
    await out.chmod(mode);
  } finally {
    await out.close();
  }
  return { size, sha256: h.digest('hex') };
}

/**
 * An errno while reading the tree as a refusal naming the entry. O_NOFOLLOW on a symbolic link
 * answers ELOOP, or ENOTDIR with O_DIRECTORY: an lstat of the entry (in `dir`, when given) tells.
 */
async function refusalOf(err: unknown, dir: FileHandle | null, name: string, path: string, what: string): Promise<Error> {
  const code = (err as NodeJS.ErrnoException).code;
  const link = code === 'ELOOP' || (code === 'ENOTDIR' && dir !== null && (await lstat(at(dir, name)).then((st) => st.isSymbolicLink(), () => false)));
  if (link) return new TreeRefusal(`${path}: the install left a symbolic link where ${what} must be (never followed)`);
  if (code === 'ENOTDIR') return new TreeRefusal(`${path}: the install left something other than a directory where ${what} must be`);
  if (code === 'ENOENT') return new TreeRefusal(`${path}: ${what} is missing, or was removed while the tree was being copied`);
  if (code === 'ENXIO' || code === 'EWOULDBLOCK' || code === 'EAGAIN') return new TreeRefusal(`${path}: the install left a special file (not a file, directory or symlink)`);
  return err instanceof Error ? err : new Error(String(err));
}
