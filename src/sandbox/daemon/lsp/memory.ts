/**
 * The memory a language server holds: the resident set (VmRSS) of its process and every
 * descendant or member of its process group (tsserver, a pyright worker, clangd's indexer), read
 * from /proc inside the sandbox, where the daemon runs as the workspace user and reads its own
 * children's entries. A process that went away between the scan and the read is skipped.
 *
 * Imports node built-ins and sibling daemon files only.
 */
import { readFileSync } from 'node:fs';
import { treeMembers } from '../proc.js';

/** VmRSS of one process in bytes (0 for a zombie, undefined when it is gone). */
function rssOf(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return undefined;
  }
}

/** The resident bytes of `root` (a process-group leader) and its processes; undefined when root is gone or /proc cannot be read. */
export function treeRssBytes(root: number | undefined): number | undefined {
  if (root === undefined) return undefined;
  const own = rssOf(root);
  if (own === undefined) return undefined;
  let members: number[];
  try {
    members = treeMembers(root, root);
  } catch {
    return own;
  }
  return members.filter((p) => p !== root).reduce((n, p) => n + (rssOf(p) ?? 0), own);
}
