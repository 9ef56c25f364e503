/**
 * The search of a stopped template build's tree for the values of setup-only entries
 * (docs/templates.md "Setup-only secrets"; issue #33 item 3, issue #42 item 5).
 *
 * It runs as root on a filesystem no process uses any more (the build sandbox was stopped), but
 * everything in the tree was written by the workspace, so nothing here resolves a path by name:
 *
 * - a descriptor walk: each directory is opened with O_DIRECTORY | O_NOFOLLOW relative to its
 *   parent's descriptor (/proc/self/fd/<fd>/<name>, host-fs.ts), each file with O_NOFOLLOW |
 *   O_NONBLOCK and read only when fstat says it is a regular file; names are raw bytes (a name that
 *   is not UTF-8 is opened and searched like any other); it stays on the tree's filesystem;
 * - a symbolic link is a hit when its own text holds a value; and it is followed **within the
 *   tree** as the sandbox would see it (repo is /workspace, home is /home/user, tmp is /tmp),
 *   component by component with lstat on descriptors, at most 40 links deep: a link whose target
 *   is a regular file of the tree that holds a value is a hit (reported at the link). A link that
 *   leaves the tree (an absolute path elsewhere, `..` past the layout) is not followed, nor one to
 *   a directory (the walk reads every directory of the tree itself, and a loop cannot form);
 * - bounded: at most `maxBytes` read in all (a file whose apparent size passes what is left is not
 *   read at all: a sparse 16 TiB file costs nothing), at most `maxMs`, at most MAX_DEPTH
 *   directories deep. A search that hits a bound, or meets an error it cannot classify, is
 *   **incomplete**: the caller keeps no template (the tree was not shown clean).
 *
 * Every regular file is read once (by device and inode), whichever names and links reach it.
 */
import { constants, type Stats } from 'node:fs';
import { lstat, open, readdir, readlink, type FileHandle } from 'node:fs/promises';
import { gone, openDirNoFollow } from '../../../sandbox/host-fs.js';

export interface SearchBounds {
  /** Bytes read in all (file contents), at most. */
  maxBytes: number;
  /** Wall time of the whole search, at most. */
  maxMs: number;
}

export type SearchResult =
  | { kind: 'clean'; files: number; bytes: number; ms: number }
  | { kind: 'hit'; name: string; path: string; via?: string }
  | { kind: 'incomplete'; reason: string; path?: string; bytes: number; ms: number };

/** Directories deeper than this below the tree's root end the search (incomplete). */
export const MAX_DEPTH = 256;
/** Symbolic links followed while resolving one (the kernel's own limit). */
const MAX_LINK_HOPS = 40;
const READ_CHUNK = 1 << 20;
const SLASH = 0x2f;

/** Where the tree's parts are in the sandbox (bubblewrap's layout, src/sandbox/bwrap/start.ts). */
const LAYOUT: Array<{ sandbox: string[]; tree: string }> = [
  { sandbox: ['workspace'], tree: 'repo' },
  { sandbox: ['home', 'user'], tree: 'home' },
  { sandbox: ['tmp'], tree: 'tmp' },
];

class Stop extends Error {
  constructor(
    readonly reason: string,
    readonly at?: string,
  ) {
    super(reason);
  }
}

/** The raw-bytes path naming `name` inside the directory held by `dir` (openat semantics). */
function atRaw(dir: FileHandle, name: Buffer): Buffer {
  if (name.length === 0 || name.includes(SLASH) || name.equals(DOT) || name.equals(DOTDOT)) throw new Stop(`a bad entry name in the walk: ${JSON.stringify(name.toString('utf8'))}`);
  return Buffer.concat([Buffer.from(`/proc/self/fd/${dir.fd}/`), name]);
}
const DOT = Buffer.from('.');
const DOTDOT = Buffer.from('..');

/** Opens the directory `name` (raw bytes) inside `parent`, never following a link; null when it is not a directory (any more). */
async function openDirAtRaw(parent: FileHandle, name: Buffer): Promise<FileHandle | null> {
  try {
    return await open(atRaw(parent, name), constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch (err) {
    if (gone(err)) return null;
    throw err;
  }
}

function split(bytes: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let start = 0;
  for (let i = 0; i <= bytes.length; i++) {
    if (i === bytes.length || bytes[i] === SLASH) {
      if (i > start) out.push(bytes.subarray(start, i));
      start = i + 1;
    }
  }
  return out;
}

/** Tree components of a sandbox path, 'virtual' for a directory of the sandbox above the tree's parts (/, /home), null outside. */
function toTree(sandbox: Buffer[]): Buffer[] | 'virtual' | null {
  const names = sandbox.map((b) => b.toString('latin1'));
  for (const l of LAYOUT) if (l.sandbox.every((s, i) => names[i] === s)) return [Buffer.from(l.tree), ...sandbox.slice(l.sandbox.length)];
  if (LAYOUT.some((l) => names.length < l.sandbox.length && names.every((n, i) => l.sandbox[i] === n))) return 'virtual';
  return null;
}

/** The sandbox path of tree components (null for the tree's root and anything not under a part of the layout). */
function toSandbox(tree: Buffer[]): Buffer[] | null {
  const top = tree[0]?.toString('latin1');
  const l = LAYOUT.find((x) => x.tree === top);
  return l ? [...l.sandbox.map((s) => Buffer.from(s)), ...tree.slice(1)] : null;
}

const show = (parts: Buffer[]) => parts.map((b) => b.toString('utf8')).join('/');

export async function searchValues(root: string, values: Array<{ name: string; value: string }>, bounds: SearchBounds): Promise<SearchResult> {
  const t0 = Date.now();
  const needles = values.filter((v) => v.value.length > 0).map((v) => ({ name: v.name, bytes: Buffer.from(v.value, 'utf8') }));
  let bytes = 0;
  let files = 0;
  if (needles.length === 0) return { kind: 'clean', files, bytes, ms: 0 };
  const overlap = Math.max(...needles.map((n) => n.bytes.length)) - 1;
  const chunk = Buffer.alloc(READ_CHUNK);
  const read = new Set<string>();
  /** The tree's filesystem: the walk never crosses a mount point (nothing is mounted there once the sandbox stopped; if anything were, it is not the tree). */
  let rootDev = -1;
  const found = (hay: Buffer) => needles.find((n) => hay.includes(n.bytes));
  const inTime = (at: string) => {
    if (Date.now() - t0 > bounds.maxMs) throw new Stop(`the search passed its time bound (${Math.round(bounds.maxMs / 1000)} s)`, at);
  };

  /** Reads one regular file (by descriptor, opened without following); the needle it holds, if any. */
  const scanAt = async (dir: FileHandle, name: Buffer, rel: string): Promise<{ name: string } | null> => {
    let fh: FileHandle;
    try {
      fh = await open(atRaw(dir, name), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch (err) {
      if (gone(err)) return null;
      throw err;
    }
    try {
      const st: Stats = await fh.stat();
      if (!st.isFile() || st.dev !== rootDev) return null;
      const key = `${st.dev}:${st.ino}`;
      if (read.has(key)) return null;
      if (st.size > bounds.maxBytes - bytes)
        throw new Stop(`${rel} is ${st.size} bytes long (${st.blocks * 512} allocated), more than is left of what the search reads in all (${bounds.maxBytes} bytes)`, rel);
      let carry = Buffer.alloc(0);
      for (;;) {
        inTime(rel);
        const { bytesRead } = await fh.read(chunk, 0, chunk.length, null);
        if (bytesRead === 0) break;
        bytes += bytesRead;
        if (bytes > bounds.maxBytes) throw new Stop(`the search passed its byte bound (${bounds.maxBytes} bytes) in ${rel}`, rel);
        const hay = carry.length ? Buffer.concat([carry, chunk.subarray(0, bytesRead)]) : chunk.subarray(0, bytesRead);
        const hit = found(hay);
        if (hit) return hit;
        carry = Buffer.from(hay.subarray(Math.max(0, hay.length - overlap)));
      }
      read.add(key);
      files++;
      return null;
    } finally {
      await fh.close();
    }
  };

  /** Opens the tree directory of `parts` by a descriptor walk from the root (null when one is missing or not a directory). */
  const openTreeDir = async (rootFh: FileHandle, parts: Buffer[]): Promise<FileHandle | null> => {
    let cur = rootFh;
    for (const p of parts) {
      const next = await openDirAtRaw(cur, p).catch(() => null);
      if (cur !== rootFh) await cur.close();
      if (!next) return null;
      cur = next;
    }
    // The root itself: a descriptor of its own (the caller closes what it gets), "." of the root's.
    return cur === rootFh ? await open(`/proc/self/fd/${rootFh.fd}/.`, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW) : cur;
  };

  /**
   * Resolves a link's target as the sandbox would, within the tree: the regular file it names
   * (a descriptor of its directory and its name), or null when it leaves the tree, names a
   * directory or anything else, is missing, or passes MAX_LINK_HOPS.
   */
  const resolve = async (rootFh: FileHandle, linkDir: Buffer[], target: Buffer): Promise<{ dir: FileHandle; name: Buffer; rel: string } | null> => {
    const fromSandbox = toSandbox(linkDir);
    if (!fromSandbox) return null;
    let at: Buffer[] = target[0] === SLASH ? [] : fromSandbox;
    let queue = split(target);
    let hops = 0;
    while (queue.length > 0) {
      inTime(show(linkDir));
      const c = queue.shift()!;
      if (c.equals(DOT)) continue;
      if (c.equals(DOTDOT)) {
        at = at.slice(0, -1);
        continue;
      }
      const next = [...at, c];
      const tree = toTree(next);
      if (tree === null) return null;
      if (tree === 'virtual') {
        at = next;
        continue;
      }
      const dir = await openTreeDir(rootFh, tree.slice(0, -1));
      if (!dir) return null;
      const name = tree[tree.length - 1]!;
      let st: Stats;
      try {
        st = await lstat(atRaw(dir, name));
      } catch {
        await dir.close();
        return null;
      }
      if (st.isSymbolicLink()) {
        const more = await readlink(atRaw(dir, name), { encoding: 'buffer' }).catch(() => null);
        await dir.close();
        if (!more || ++hops > MAX_LINK_HOPS) return null;
        if (more[0] === SLASH) at = [];
        queue = [...split(more), ...queue];
        continue;
      }
      if (st.isDirectory()) {
        await dir.close();
        at = next;
        continue;
      }
      if (st.isFile() && queue.every((q) => q.equals(DOT))) return { dir, name, rel: show(tree) };
      await dir.close();
      return null;
    }
    return null; // a directory (or the sandbox's own /): the walk reads the tree's directories itself
  };

  const walk = async (rootFh: FileHandle, dir: FileHandle, parts: Buffer[], depth: number): Promise<{ name: string; path: string; via?: string } | null> => {
    const rel = show(parts);
    if (depth > MAX_DEPTH) throw new Stop(`the tree nests deeper than ${MAX_DEPTH} directories (at ${rel})`, rel);
    const entries = await readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true, encoding: 'buffer' });
    for (const e of entries) {
      const name = e.name as unknown as Buffer;
      const path = show([...parts, name]);
      inTime(path);
      const inName = found(name);
      if (inName) return { name: inName.name, path };
      if (e.isDirectory()) {
        const sub = await openDirAtRaw(dir, name);
        if (!sub) continue;
        try {
          if ((await sub.stat()).dev !== rootDev) continue;
          const hit = await walk(rootFh, sub, [...parts, name], depth + 1);
          if (hit) return hit;
        } finally {
          await sub.close();
        }
      } else if (e.isFile()) {
        const hit = await scanAt(dir, name, path);
        if (hit) return { name: hit.name, path };
      } else if (e.isSymbolicLink()) {
        const target = await readlink(atRaw(dir, name), { encoding: 'buffer' }).catch(() => null);
        if (!target) continue;
        const inTarget = found(target);
        if (inTarget) return { name: inTarget.name, path, via: 'the text of the symbolic link' };
        const to = await resolve(rootFh, parts, target);
        if (!to) continue;
        try {
          const hit = await scanAt(to.dir, to.name, to.rel);
          if (hit) return { name: hit.name, path, via: `the symbolic link's target ${to.rel}` };
        } finally {
          await to.dir.close();
        }
      }
    }
    return null;
  };

  let rootFh: FileHandle | undefined;
  try {
    rootFh = await openDirNoFollow(root);
    rootDev = (await rootFh.stat()).dev;
    const hit = await walk(rootFh, rootFh, [], 0);
    if (hit) return { kind: 'hit', ...hit };
    return { kind: 'clean', files, bytes, ms: Date.now() - t0 };
  } catch (err) {
    const reason = err instanceof Stop ? err.reason : `the search failed: ${(err as NodeJS.ErrnoException).code ?? ''} ${(err as Error).message}`.trim();
    return { kind: 'incomplete', reason, ...(err instanceof Stop && err.at ? { path: err.at } : {}), bytes, ms: Date.now() - t0 };
  } finally {
    await rootFh?.close();
  }
}
