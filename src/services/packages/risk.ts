/**
 * Risk signals a plan carries for the owner to read before approving (docs/packages.md): a version
 * published in the last days, a name one edit away from a well-known one (typosquats), a deprecated
 * version, install scripts. Every plan needs the owner's approval anyway; the signals say what to
 * look at, and the approval request repeats them.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface RiskSignal {
  kind: 'recently_published' | 'similar_to_popular' | 'deprecated' | 'install_scripts';
  package: string;
  message: string;
}

export const RECENT_DAYS = 7;

let popular: { npm: string[]; uv: string[] } | undefined;
function popularNames(root: string): { npm: string[]; uv: string[] } {
  popular ??= JSON.parse(readFileSync(join(root, 'data', 'popular-packages.json'), 'utf8')) as { npm: string[]; uv: string[] };
  return popular;
}

/** Damerau-Levenshtein (optimal string alignment) distance, stopping early past `max`. */
export function editDistance(a: string, b: string, max = 2): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  const list: number[][] = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    let rowMin = Infinity;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(list[i - 1]![j]! + 1, list[i]![j - 1]! + 1, list[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, list[i - 2]![j - 2]! + 1);
      list[i]![j] = v;
      rowMin = Math.min(rowMin, v);
    }
    if (rowMin > max) return max + 1;
  }
  return list[a.length]![b.length]!;
}

const canon = (n: string) => n.toLowerCase().replace(/[-_.]+/g, '-');

/** The well-known name `name` is one edit away from (two for names of 8 or more characters), if any. */
export function similarPopular(root: string, ecosystem: 'npm' | 'uv', name: string): string | null {
  const canonical = canon(name);
  const list = popularNames(root)[ecosystem];
  if (list.some((p) => canon(p) === canonical)) return null;
  const max = canonical.length >= 8 ? 2 : 1;
  let best: { name: string; d: number } | null = null;
  for (const p of list) {
    const d = editDistance(canonical, canon(p), max);
    if (d <= max && (!best || d < best.d)) best = { name: p, d };
  }
  return best?.name ?? null;
}

export function riskSignals(
  root: string,
  ecosystem: 'npm' | 'uv',
  requested: string,
  pkgs: Array<{ name: string; version: string; publishedAt?: string | null; deprecated?: string | null; scripts?: Record<string, string> }>,
  now = Date.now(),
): RiskSignal[] {
  const out: RiskSignal[] = [];
  const like = similarPopular(root, ecosystem, requested);
  if (like) out.push({ kind: 'similar_to_popular', package: requested, message: `${requested} is one edit away from the well-known package ${like}: check it is the one you meant (typosquats look like this)` });
  for (const pkg of pkgs) {
    const id = `${pkg.name}@${pkg.version}`;
    if (pkg.publishedAt) {
      const age = now - Date.parse(pkg.publishedAt);
      if (age >= 0 && age < RECENT_DAYS * 86400_000) out.push({ kind: 'recently_published', package: id, message: `${id} was published ${Math.floor(age / 3600_000)} hours ago (less than ${RECENT_DAYS} days): new versions are how hijacked packages arrive` });
    }
    if (pkg.deprecated) out.push({ kind: 'deprecated', package: id, message: `${id} is deprecated: ${pkg.deprecated.slice(0, 300)}` });
    const scripts = Object.keys(pkg.scripts ?? {});
    if (scripts.length) out.push({ kind: 'install_scripts', package: id, message: `${id} has install scripts (${scripts.join(', ')}); they run only if the plan allows lifecycle scripts` });
  }
  return out;
}
