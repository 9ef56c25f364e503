/**
 * User namespace id maps (/proc/<pid>/uid_map, gid_map: lines of `inside outside count`), and
 * whether one lets a process be the node's root. Pure functions: the Kubernetes driver reads a
 * privileged Pod's /proc/self/uid_map before its command runs (kubernetes/privileged.ts); the
 * bubblewrap driver checks a map it is asked to write (SandboxSpec.rootUserNamespace).
 */

export interface IdRange {
  inside: number;
  outside: number;
  count: number;
}

/** The ranges of a map; null when a line is not three unsigned 32-bit numbers or a count is 0. */
export function parseIdMap(text: string): IdRange[] | null {
  const ranges: IdRange[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const m = /^\s*(\d{1,10})\s+(\d{1,10})\s+(\d{1,10})\s*$/.exec(line);
    if (!m) return null;
    const [inside, outside, count] = [Number(m[1]), Number(m[2]), Number(m[3])];
    if (inside > 0xffffffff || outside > 0xffffffff || count === 0 || count > 0xffffffff) return null;
    ranges.push({ inside, outside, count });
  }
  return ranges;
}

/**
 * Why a process with this uid_map could act as the node's root, or null when it cannot: the map
 * is unreadable or empty (no user namespace can be told), or a range reaches outside id 0 (the
 * node's identity map `0 0 4294967295` of a Pod without a user namespace is one such range).
 */
export function hostRootProblem(text: string): string | null {
  const ranges = parseIdMap(text);
  if (ranges === null) return `uid_map is not a user namespace map (${JSON.stringify(text.slice(0, 200))})`;
  if (ranges.length === 0) return 'uid_map is empty';
  const root = ranges.find((r) => r.outside === 0);
  if (root) {
    return root.inside === 0 && root.count === 4294967295
      ? 'uid_map is the identity map of the node (0 0 4294967295): no user namespace, uid 0 is the node root'
      : `uid_map maps uid ${root.inside} inside onto the node root (${root.inside} 0 ${root.count})`;
  }
  return null;
}
