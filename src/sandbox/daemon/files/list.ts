/** fs.list: one page of a directory, sorted by name, resumable after a name or at an index. */
import { closeSync, fstatSync, lstatSync, readdirSync, readlinkSync, type Stats } from 'node:fs';
import { FILE_LIMITS, intParam, kindOf, modeString, obj, precondition } from './common.js';
import { fdPath, fsError, joinRel } from './confinement.js';
import type { FsListEntry } from '../protocol.js';
import type { Handlers } from '../server.js';
import type { FileContext } from './context.js';

export function listMethods(fc: FileContext): Handlers<'fs.list'> {
  const { c } = fc;
  return {
    'fs.list': (params) => {
      const p = obj(params);
      const limit = intParam(p.limit, 'limit', 1, FILE_LIMITS.listPage, 100);
      const shown = String(p.path ?? '.');
      const segs = c.segments(p.path ?? '.');
      const dir = c.openDir(segs, shown);
      try {
        const st = fstatSync(dir.fd);
        if (!st.isDirectory()) throw precondition(`path: ${shown} is not a directory`, { path: shown });
        let names: string[];
        try {
          names = readdirSync(fdPath(dir.fd));
        } catch (e) {
          throw fsError(e, 'path', shown);
        }
        names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
        let start = 0;
        if (typeof p.after === 'string') {
          let lo = 0;
          let hi = names.length;
          while (lo < hi) {
            const mid = (lo + hi) >> 1;
            if (names[mid]! <= p.after) lo = mid + 1;
            else hi = mid;
          }
          start = lo;
        } else if (p.index !== undefined) {
          start = intParam(p.index, 'index', 0, Number.MAX_SAFE_INTEGER, 0);
        }
        const entries: FsListEntry[] = [];
        let i = start;
        for (; i < names.length && entries.length < limit; i++) {
          const name = names[i]!;
          let est: Stats;
          try {
            est = lstatSync(fdPath(dir.fd, name));
          } catch {
            continue; // removed while listing
          }
          const type = kindOf(est);
          const entry: FsListEntry = {
            name,
            path: joinRel(dir.rel, name),
            type,
            size: est.size,
            mode: modeString(est.mode),
            mtime: est.mtime.toISOString(),
          };
          if (type === 'symlink') {
            try {
              entry.linkTarget = readlinkSync(fdPath(dir.fd, name));
            } catch {
              // gone
            }
          }
          entries.push(entry);
        }
        return { path: dir.rel, entries, total: names.length, nextIndex: i, last: entries.length > 0 ? names[i - 1] : ((p.after ?? null) as string | null), hasMore: i < names.length };
      } finally {
        closeSync(dir.fd);
      }
    },

  };
}
