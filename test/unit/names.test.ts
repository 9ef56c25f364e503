/**
 * #13 item 8: in services and tools, parameters and fields of named functions, methods and
 * constructors have names a newcomer reads without context (no `this.d`, `a`, `c`, `w`). Short
 * names stay where they are idiomatic: one-line callbacks, loop indices, and symmetric pairs such
 * as `(a, b)` of a comparison or a distance. This scans declarations line by line.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(__dirname, '..', '..', 'src');
const DECL = /^\s*(?:export\s+)?(?:async\s+)?(?:function\s+\w+|(?:(?:private|public|protected|static|readonly|override)\s+)*(?:async\s+)?(?!if\b|for\b|while\b|switch\b|catch\b|return\b)\w+)\s*(?:<[^>]*>)?\s*\(([^)]*)\)\s*(?::[^{]*)?\{\s*$/;

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

/** One-letter parameter names of a declaration's parameter list (types and defaults stripped). */
export function shortParams(params: string): string[] {
  const names = [...params.matchAll(/(?:^|,)\s*(?:(?:private|public|protected|readonly)\s+)*([A-Za-z_$][\w$]*)\??\s*[:=,]/g)].map((m) => m[1]!);
  const short = names.filter((n) => n.length === 1 && n !== '_');
  const pair = [...short].sort().join('');
  return pair === 'ab' || pair === 'xy' ? [] : short;
}

describe('names in services and tools', () => {
  it('the scanner sees one-letter parameters and lets symmetric pairs be', () => {
    expect(shortParams('a: { x: number }, signal?: AbortSignal')).toEqual(['a']);
    expect(shortParams('private readonly d: Deps')).toEqual(['d']);
    expect(shortParams('a: string, b: string, max = 2')).toEqual([]);
    expect(shortParams('workspace: WorkspaceRow, n = 3')).toEqual(['n']);
  });

  it('no named function, method or constructor takes a one-letter parameter', () => {
    const offenders: string[] = [];
    for (const area of ['services', 'tools']) {
      for (const file of filesUnder(join(ROOT, area))) {
        readFileSync(file, 'utf8').split('\n').forEach((line, i) => {
          const m = DECL.exec(line);
          if (!m) return;
          for (const n of shortParams(m[1]!)) offenders.push(`${relative(ROOT, file)}:${i + 1} ${n}`);
        });
      }
    }
    expect(offenders).toEqual([]);
  });
});
