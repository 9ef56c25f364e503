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
 * Used by the overview (instruction-file patterns, .gitignore rules) and the symbol index (the
 * file names ctags has a parser for). Imports nothing.
 */

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
