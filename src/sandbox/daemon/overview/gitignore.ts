/** The root .gitignore (its patterns compiled with the daemon's one glob dialect, ../glob.ts). */
import { compileGlob, type GlobMatcher } from '../glob.js';
import { OVERVIEW_LIMITS } from './rules.js';

// ---------------------------------------------------------------------------------------------
// Glob patterns and .gitignore
// ---------------------------------------------------------------------------------------------

export interface IgnoreRule {
  re: GlobMatcher;
  negate: boolean;
  dirOnly: boolean;
}

/**
 * The root .gitignore's patterns, best effort: comments, blank lines, `!` negation, a trailing `/`
 * (directories only), a leading or inner `/` (anchored to the root), `*`, `?`, `[...]` and `**`.
 * The last matching rule wins; an ignored directory is never entered, so nothing under it can be
 * re-included (as in git). Nested .gitignore files and global excludes are not read.
 */
export function parseGitignore(text: string): IgnoreRule[] {
  const rules: IgnoreRule[] = [];
  for (const raw of text.split('\n')) {
    if (rules.length >= OVERVIEW_LIMITS.gitignoreMaxRules) break;
    let line = raw.replace(/\r$/, '');
    if (line.length > 4096) continue;
    if (!line.endsWith('\\ ')) line = line.replace(/\s+$/, '');
    if (line === '' || line.startsWith('#')) continue;
    let negate = false;
    if (line.startsWith('!')) {
      negate = true;
      line = line.slice(1);
    } else if (line.startsWith('\\!') || line.startsWith('\\#')) {
      line = line.slice(1);
    }
    let dirOnly = false;
    if (line.endsWith('/')) {
      dirOnly = true;
      line = line.replace(/\/+$/, '');
    }
    if (line === '') continue;
    const anchored = line.includes('/');
    if (line.startsWith('/')) line = line.replace(/^\/+/, '');
    if (line === '') continue;
    try {
      rules.push({ re: compileGlob(anchored ? line : `**/${line}`), negate, dirOnly });
    } catch {
      // A pattern that does not compile is ignored.
    }
  }
  return rules;
}

export function isIgnored(rules: IgnoreRule[], rel: string, isDir: boolean): boolean {
  let ignored = false;
  for (const r of rules) {
    if (r.dirOnly && !isDir) continue;
    if (r.negate ? ignored : !ignored) {
      if (r.re.test(rel)) ignored = !r.negate;
    }
  }
  return ignored;
}
