/**
 * The daemon's one glob dialect, the one the tools' glob fields mean (grep_search's and
 * symbols_references' `glob`, e.g. "**\/*.ts", "src/**\/*.py", handed to ripgrep, whose globs are
 * gitignore-style): patterns are '/'-separated and relative;
 *
 *  - `*` matches any run of characters within one path segment (never a '/');
 *  - `?` matches one character other than '/';
 *  - `[...]` is a character class (`[!...]` or `[^...]` negated), never matching '/';
 *  - `**` as a whole segment matches any number of segments, none included ("**\/a" is "a" too,
 *    "a/**" everything under a); elsewhere it is the same as `*`;
 *  - `\x` is the character x.
 *
 * Two compilers of that one dialect: `compileGlob` matches without backtracking (each segment by
 * the classic two-pointer wildcard match, segments likewise with `**` as the wildcard, so time is
 * bounded by pattern length times path length); the overview uses it for patterns that come from the
 * repository (.gitignore rules) and for its instruction-file patterns. `globSource` gives a RegExp
 * source, for combining many trusted patterns into one expression: the symbol index's filter over
 * the file names ctags has a parser for (patterns from the ctags binary, matched on base names).
 * Imports nothing.
 */

/** A compiled glob: test(path) for a '/'-separated relative path. */
export interface GlobMatcher {
  test(path: string): boolean;
}

type Token = { kind: 'char'; c: string } | { kind: 'one' } | { kind: 'star' } | { kind: 'class'; negate: boolean; chars: string; ranges: Array<[string, string]> };
type Part = { kind: 'segment'; tokens: Token[] } | { kind: 'dirs' } | { kind: 'rest' };

/** Compiles a glob into a matcher that never backtracks exponentially (see the module comment). */
export function compileGlob(glob: string): GlobMatcher {
  const segs = glob.split('/');
  const parts: Part[] = [];
  segs.forEach((seg, i) => {
    if (seg === '**') {
      // "**" as a whole segment: any number of segments; at the end, at least one (everything under).
      const part: Part = i === segs.length - 1 && segs.length > 1 ? { kind: 'rest' } : { kind: 'dirs' };
      if (part.kind === 'dirs' && parts[parts.length - 1]?.kind === 'dirs') return; // "**/**/" is "**/"
      parts.push(part);
    } else parts.push({ kind: 'segment', tokens: segmentTokens(seg) });
  });
  return { test: (path: string) => matchParts(parts, path.split('/')) };
}

function segmentTokens(seg: string): Token[] {
  const out: Token[] = [];
  for (let i = 0; i < seg.length; i++) {
    const c = seg[i]!;
    if (c === '*') {
      if (out[out.length - 1]?.kind !== 'star') out.push({ kind: 'star' });
    } else if (c === '?') out.push({ kind: 'one' });
    else if (c === '[' && seg.indexOf(']', i + 2) > 0) {
      const close = seg.indexOf(']', i + 2);
      let body = seg.slice(i + 1, close);
      let negate = false;
      if (body.startsWith('!') || body.startsWith('^')) {
        negate = true;
        body = body.slice(1);
      }
      let chars = '';
      const ranges: Array<[string, string]> = [];
      for (let j = 0; j < body.length; j++) {
        if (body[j + 1] === '-' && j + 2 < body.length) {
          ranges.push([body[j]!, body[j + 2]!]);
          j += 2;
        } else chars += body[j];
      }
      out.push({ kind: 'class', negate, chars, ranges });
      i = close;
    } else if (c === '\\' && i + 1 < seg.length) out.push({ kind: 'char', c: seg[++i]! });
    else out.push({ kind: 'char', c });
  }
  return out;
}

function matchesOne(t: Token, c: string): boolean {
  if (t.kind === 'char') return t.c === c;
  if (t.kind === 'one') return true;
  if (t.kind === 'class') {
    const inside = t.chars.includes(c) || t.ranges.some(([lo, hi]) => c >= lo && c <= hi);
    return inside !== t.negate;
  }
  return false;
}

/** One segment against its tokens: two pointers, back to just after the last star on a mismatch. */
function matchSegment(tokens: Token[], s: string): boolean {
  let ti = 0;
  let si = 0;
  let starTi = -1;
  let starSi = 0;
  while (si < s.length) {
    const t = tokens[ti];
    if (t && t.kind === 'star') {
      starTi = ti++;
      starSi = si;
    } else if (t && matchesOne(t, s[si]!)) {
      ti++;
      si++;
    } else if (starTi >= 0) {
      ti = starTi + 1;
      si = ++starSi;
    } else return false;
  }
  while (tokens[ti]?.kind === 'star') ti++;
  return ti === tokens.length;
}

/** The path's segments against the parts, the same way with `**` as the wildcard. */
function matchParts(parts: Part[], segs: string[]): boolean {
  let pi = 0;
  let si = 0;
  let starPi = -1;
  let starSi = 0;
  while (si < segs.length) {
    const p = parts[pi];
    if (p?.kind === 'rest') return true; // at least one segment is left
    if (p?.kind === 'dirs') {
      starPi = pi++;
      starSi = si;
    } else if (p?.kind === 'segment' && matchSegment(p.tokens, segs[si]!)) {
      pi++;
      si++;
    } else if (starPi >= 0) {
      pi = starPi + 1;
      si = ++starSi;
    } else return false;
  }
  while (parts[pi]?.kind === 'dirs') pi++;
  return pi === parts.length;
}

export const GLOB_CHARS = /[*?[]/;

/** Compiles a '/'-separated glob (`*`, `?`, `[...]`, `**`) to an anchored RegExp over a relative path. */
export function globToRegExp(glob: string): RegExp {
  return new RegExp(`^${globSource(glob)}$`);
}

const ANY_DIRS = '(?:[^/]*/)*';
const ANY_CHARS = '[^/]*';

/** The unanchored regular-expression source of a glob (to combine several into one RegExp). */
export function globSource(glob: string): string {
  let re = '';
  let i = 0;
  while (i < glob.length) {
    const c = glob[i]!;
    if (c === '*') {
      if (glob[i + 1] === '*') {
        const atSegmentStart = i === 0 || glob[i - 1] === '/';
        const next = glob[i + 2];
        if (atSegmentStart && next === '/') {
          // "**/**/" is "**/": repeating it only makes a backtracking RegExp slower (a hostile
          // .gitignore line could otherwise stall the overview).
          if (!re.endsWith(ANY_DIRS)) re += ANY_DIRS;
          i += 3;
          continue;
        }
        if (atSegmentStart && next === undefined) {
          re += '.*';
          i += 2;
          continue;
        }
        if (!re.endsWith(ANY_CHARS)) re += ANY_CHARS;
        i += 2;
        continue;
      }
      if (!re.endsWith(ANY_CHARS)) re += ANY_CHARS; // "**" inside a segment and "***" are "*"
      i += 1;
      continue;
    }
    if (c === '?') {
      re += '[^/]';
      i += 1;
      continue;
    }
    if (c === '[') {
      const close = glob.indexOf(']', i + 2);
      if (close > 0 && !glob.slice(i + 1, close).includes('/')) {
        let body = glob.slice(i + 1, close);
        let negate = false;
        if (body.startsWith('!') || body.startsWith('^')) {
          negate = true;
          body = body.slice(1);
        }
        body = body.replace(/[\\\]^]/g, (m) => '\\' + m);
        re += `[${negate ? '^' : ''}${body}]`;
        i = close + 1;
        continue;
      }
    }
    if (c === '\\' && i + 1 < glob.length) {
      re += escapeRegExp(glob[i + 1]!);
      i += 2;
      continue;
    }
    re += escapeRegExp(c);
    i += 1;
  }
  return re;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}
