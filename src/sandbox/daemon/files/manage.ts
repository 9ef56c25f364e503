/** fs.delete, fs.move and fs.mkdir: entries created, moved and removed without following a symlink. */
import { closeSync, fchmodSync, linkSync, lstatSync, mkdirSync, openSync, readdirSync, renameSync, rmdirSync, unlinkSync, type Stats } from 'node:fs';
import { DaemonError } from '../protocol.js';
import { DEFAULT_DIR_MODE, O_DIR_NOFOLLOW, conflict, denied, errno, invalid, kindOf, notFound, obj, parseSha, precondition } from './common.js';
import { fdPath, fsError, joinRel, type Entry } from './confinement.js';
import type { Handlers } from '../server.js';
import type { FileContext } from './context.js';

export function manageMethods(fc: FileContext): Handlers<'fs.delete' | 'fs.move' | 'fs.mkdir'> {
  const { c, exclusive, changed } = fc;
  const { currentHash, undoCreated } = fc.staging;
  return {
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
