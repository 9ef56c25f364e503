/**
 * A bounded walk of the checkout for the files each server serves (workspace diagnostics and
 * workspace symbols open some so that the server loads the project). Skips dot directories,
 * node_modules, __pycache__ and virtual environments; never follows a symlink.
 *
 * Imports node built-ins and sibling daemon files only.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { serverForPath, type ServerId } from './servers.js';

const SKIP = new Set(['node_modules', '__pycache__', 'venv', 'dist', 'build', 'target', 'out']);
/** Directory entries looked at, at most. */
const MAX_ENTRIES = 20_000;

export function filesByServer(root: string, perServer: number): Map<ServerId, string[]> {
  const out = new Map<ServerId, string[]>();
  const queue: string[] = [''];
  let seen = 0;
  while (queue.length > 0 && seen < MAX_ENTRIES) {
    const dir = queue.shift()!;
    let entries;
    try {
      entries = readdirSync(dir === '' ? root : path.join(root, dir), { withFileTypes: true });
    } catch {
      continue;
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const e of entries) {
      if (++seen > MAX_ENTRIES) break;
      const rel = dir === '' ? e.name : `${dir}/${e.name}`;
      if (e.isDirectory()) {
        if (!e.name.startsWith('.') && !SKIP.has(e.name)) queue.push(rel);
      } else if (e.isFile()) {
        const hit = serverForPath(rel);
        if (!hit) continue;
        const list = out.get(hit.spec.id) ?? [];
        if (list.length < perServer) list.push(rel);
        out.set(hit.spec.id, list);
      }
    }
  }
  return out;
}
