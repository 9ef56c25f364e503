/** Walking the repository: the main breadth-first walk and small bounded subtree walks. */
import { closeSync, fstatSync, type Dirent } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { fdPath } from '../files/confinement.js';
import { OVERVIEW_LIMITS, IGNORED_DIRS, LANGUAGE_BY_EXTENSION, HEADER_EXT, type LanguageShare, type Ctx } from './rules.js';
import { isIgnored, type IgnoreRule } from './gitignore.js';
import { DirChain, dirEntries, openDirInside } from './access.js';

// ---------------------------------------------------------------------------------------------
// Walking
// ---------------------------------------------------------------------------------------------

export interface WalkResult {
  filesScanned: number;
  counts: Map<string, number>;
  headers: number;
}

/**
 * Breadth-first walk of the root: counts files and languages, reports instruction candidates.
 *
 * A directory is read with one readdir when its st_size says it is of ordinary size (several times
 * faster than reading entry by entry), and streamed with opendir otherwise, so a huge directory
 * never has to fit in memory at once. Symlinks are never followed; special files are skipped.
 */
export async function mainWalk(
  ctx: Ctx,
  o: {
    maxFiles: number;
    ignore: IgnoreRule[];
    countLanguages: boolean;
    onCandidate?: (rel: string, name: string) => void;
  },
): Promise<WalkResult> {
  const counts = new Map<string, number>();
  let headers = 0;
  let filesScanned = 0;
  let dirsQueued = 1;
  const queue: string[] = [''];
  let head = 0;
  let tick = 0;
  let stop = false;
  const hasRules = o.ignore.length > 0;

  /** Handles one entry of dirRel; false stops the walk. */
  const visit = (ent: Dirent, dirRel: string): boolean => {
    if ((++tick & 255) === 0 && Date.now() >= ctx.deadline) {
      ctx.partial = true;
      return false;
    }
    const name = ent.name;
    const rel = dirRel === '' ? name : `${dirRel}/${name}`;
    if (ent.isDirectory()) {
      if (IGNORED_DIRS.has(name)) return true;
      if (hasRules && isIgnored(o.ignore, rel, true)) return true;
      if (dirsQueued >= o.maxFiles) {
        ctx.partial = true;
        return false;
      }
      dirsQueued++;
      queue.push(rel);
    } else if (ent.isFile()) {
      if (hasRules && isIgnored(o.ignore, rel, false)) return true;
      if (filesScanned >= o.maxFiles) {
        ctx.partial = true;
        return false;
      }
      filesScanned++;
      if (o.countLanguages) {
        const dot = name.lastIndexOf('.');
        if (dot > 0 && dot < name.length - 1) {
          const ext = name.slice(dot + 1).toLowerCase();
          if (ext === HEADER_EXT) headers++;
          else {
            const lang = LANGUAGE_BY_EXTENSION[ext];
            if (lang) counts.set(lang, (counts.get(lang) ?? 0) + 1);
          }
        }
      }
      o.onCandidate?.(rel, name);
    } else if (ent.isSymbolicLink()) {
      // Never walked or counted; an instruction file may be a link, checked when it is read.
      if (hasRules && isIgnored(o.ignore, rel, false)) return true;
      o.onCandidate?.(rel, name);
    }
    // Devices, fifos and sockets are skipped.
    return true;
  };

  // Each directory is opened from its parent's descriptor with O_NOFOLLOW (access.ts DirChain):
  // one replaced by a symlink meanwhile is skipped, never followed.
  const dirs = new DirChain(ctx.rootFd);
  try {
  while (head < queue.length && !stop) {
    if (Date.now() >= ctx.deadline) {
      ctx.partial = true;
      break;
    }
    const dirRel = queue[head]!;
    queue[head++] = ''; // let the string go
    const fd = dirs.get(dirRel);
    if (fd === null) continue; // vanished or replaced meanwhile
    let size: number;
    try {
      size = fstatSync(fd).size;
    } catch {
      continue;
    }
    if (size <= OVERVIEW_LIMITS.readWholeDirBytes) {
      let ents: Dirent[];
      try {
        ents = await readdir(fdPath(fd), { withFileTypes: true });
      } catch {
        continue; // unreadable or vanished
      }
      for (const ent of ents) {
        if (!visit(ent, dirRel)) {
          stop = true;
          break;
        }
      }
      continue;
    }
    for await (const ent of dirEntries(fd, 256)) {
      if (!visit(ent, dirRel)) {
        stop = true;
        break;
      }
    }
  }
  } finally {
    dirs.close();
  }
  return { filesScanned, counts, headers };
}

export function summariseLanguages(counts: Map<string, number>, headers: number): LanguageShare[] {
  if (headers > 0) {
    const c = counts.get('C') ?? 0;
    const cpp = counts.get('C++') ?? 0;
    const lang = cpp > c ? 'C++' : 'C';
    counts.set(lang, (counts.get(lang) ?? 0) + headers);
  }
  let total = 0;
  for (const n of counts.values()) total += n;
  return [...counts.entries()]
    .map(([language, files]) => ({ language, files, share: Math.round((files / total) * 1000) / 1000 }))
    .sort((a, b) => b.files - a.files || (a.language < b.language ? -1 : a.language > b.language ? 1 : 0));
}

export interface SubtreeEntry {
  rel: string;
  kind: 'file' | 'link' | 'dir';
}

/**
 * Small bounded walk under a fixed directory (e.g. .cursor/rules). The directory itself may be a
 * symlink that resolves under the root; nothing below it is followed. Reports logical paths.
 */
export async function walkSubtree(ctx: Ctx, baseRel: string, visit: (e: SubtreeEntry) => void): Promise<void> {
  const base = openDirInside(ctx, baseRel);
  if (!base) return;
  // Below the base, each directory is opened from its parent's descriptor with O_NOFOLLOW.
  const dirs = new DirChain(base.fd);
  try {
    await walkBelow(ctx, baseRel, dirs, visit);
  } finally {
    dirs.close();
    closeSync(base.fd);
  }
}

async function walkBelow(ctx: Ctx, baseRel: string, dirs: DirChain, visit: (e: SubtreeEntry) => void): Promise<void> {
  /** sub: the path under the base ('' for the base itself). */
  const queue: Array<{ rel: string; sub: string; depth: number }> = [{ rel: baseRel, sub: '', depth: 0 }];
  let entries = 0;
  for (let head = 0; head < queue.length; head++) {
    if (Date.now() >= ctx.deadline) {
      ctx.partial = true;
      return;
    }
    const { rel, sub, depth } = queue[head]!;
    const fd = dirs.get(sub);
    if (fd === null) continue;
    for await (const ent of dirEntries(fd, 64)) {
      if (++entries > OVERVIEW_LIMITS.subtreeMaxEntries) {
        ctx.partial = true;
        return;
      }
      const childRel = `${rel}/${ent.name}`;
      if (ent.isDirectory()) {
        if (IGNORED_DIRS.has(ent.name)) continue;
        if (depth + 1 > OVERVIEW_LIMITS.subtreeMaxDepth) {
          ctx.partial = true;
          continue;
        }
        visit({ rel: childRel, kind: 'dir' });
        queue.push({ rel: childRel, sub: sub === '' ? ent.name : `${sub}/${ent.name}`, depth: depth + 1 });
      } else if (ent.isFile()) visit({ rel: childRel, kind: 'file' });
      else if (ent.isSymbolicLink()) visit({ rel: childRel, kind: 'link' });
    }
  }
}
