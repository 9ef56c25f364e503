/**
 * The relative imports of a source file, as layers.test.ts and domains.test.ts read them: static,
 * type-only, re-exporting and dynamic imports, resolved to paths under src/.
 */
import { posix } from 'node:path';

export interface Edge {
  from: string;
  to: string;
}

const IMPORT = /(?:^|[;\s{}])(?:import|export)\s[^'"`;]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|(?:^|[;\s])import\s+['"]([^'"]+)['"]/g;

/** The relative imports of one file (static, type-only, re-exports, dynamic), resolved to paths under src/. */
export function importsOf(rel: string, source: string): Edge[] {
  const out: Edge[] = [];
  for (const m of source.matchAll(IMPORT)) {
    const spec = m[1] ?? m[2] ?? m[3]!;
    if (!spec.startsWith('.')) continue;
    const to = posix.normalize(posix.join(posix.dirname(rel), spec)).replace(/\.js$/, '.ts');
    out.push({ from: rel, to });
  }
  return out;
}
