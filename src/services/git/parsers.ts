/**
 * The pure parts of the git domain: git's output parsed (status, push), refs and paths checked
 * before git runs, and git's refusals mapped to errors. Unit-tested in test/unit/git-parse.test.ts.
 */
import { posix } from 'node:path';
import { ServiceError } from '../../core/errors.js';

export interface StatusEntry {
  path: string;
  origPath?: string;
  /** Index (staged) state letter, "." when unchanged; "?" for untracked. */
  index: string;
  /** Working-tree (unstaged) state letter, "." when unchanged; "?" for untracked. */
  worktree: string;
  kind: 'changed' | 'renamed' | 'unmerged' | 'untracked';
}

export interface Identity {
  name: string;
  email: string;
}

export function badRef(field: string, value: string): ServiceError | null {
  if (value.startsWith('-') || /[\0\n\r]/.test(value)) return new ServiceError('INVALID_ARGUMENT', `${field}: must not start with "-" or contain control characters`, { field });
  return null;
}

export function tail(text: string, lines = 8): string {
  return text.trim().split('\n').slice(-lines).join('\n');
}

/** Parses `git status --porcelain=v2 --branch -z`. */
export function parseStatusV2(out: string): {
  headOid: string | null;
  branch: string | null;
  upstream: string | null;
  ahead: number | null;
  behind: number | null;
  entries: StatusEntry[];
} {
  const recs = out.split('\0');
  let headOid: string | null = null;
  let branch: string | null = null;
  let upstream: string | null = null;
  let ahead: number | null = null;
  let behind: number | null = null;
  const entries: StatusEntry[] = [];
  for (let i = 0; i < recs.length; i++) {
    const rec = recs[i]!;
    if (!rec) continue;
    if (rec.startsWith('# branch.oid ')) {
      const v = rec.slice(13);
      headOid = v === '(initial)' ? null : v;
    } else if (rec.startsWith('# branch.head ')) {
      const v = rec.slice(14);
      branch = v === '(detached)' ? null : v;
    } else if (rec.startsWith('# branch.upstream ')) upstream = rec.slice(18);
    else if (rec.startsWith('# branch.ab ')) {
      const m = /^\+(\d+) -(\d+)$/.exec(rec.slice(12));
      if (m) {
        ahead = Number(m[1]);
        behind = Number(m[2]);
      }
    } else if (rec.startsWith('1 ')) {
      const f = rec.split(' ');
      entries.push({ path: f.slice(8).join(' '), index: f[1]![0]!, worktree: f[1]![1]!, kind: 'changed' });
    } else if (rec.startsWith('2 ')) {
      const f = rec.split(' ');
      entries.push({ path: f.slice(9).join(' '), origPath: recs[++i] ?? '', index: f[1]![0]!, worktree: f[1]![1]!, kind: 'renamed' });
    } else if (rec.startsWith('u ')) {
      const f = rec.split(' ');
      entries.push({ path: f.slice(10).join(' '), index: f[1]![0]!, worktree: f[1]![1]!, kind: 'unmerged' });
    } else if (rec.startsWith('? ')) {
      entries.push({ path: rec.slice(2), index: '?', worktree: '?', kind: 'untracked' });
    }
  }
  return { headOid, branch, upstream, ahead, behind, entries };
}

/** Parses `git push --porcelain` lines: flag, from:to, summary. */
export function parsePushPorcelain(out: string): Array<{ flag: string; from: string; to: string; summary: string }> {
  const refs: Array<{ flag: string; from: string; to: string; summary: string }> = [];
  for (const line of out.split('\n')) {
    const m = /^([ +\-*!=])\t([^\t]*):([^\t]*)\t(.*)$/.exec(line);
    if (m) refs.push({ flag: m[1]!, from: m[2]!, to: m[3]!, summary: m[4]! });
  }
  return refs;
}

export const PUSH_FLAG: Record<string, string> = { ' ': 'fast-forward', '+': 'forced', '-': 'deleted', '*': 'created', '!': 'rejected', '=': 'up-to-date' };

/** Shell snippet printing the operation in progress, if any. */
export const IN_PROGRESS = `if [ -e "$(git rev-parse --git-path MERGE_HEAD)" ]; then echo merge; elif [ -d "$(git rev-parse --git-path rebase-merge)" ] || [ -d "$(git rev-parse --git-path rebase-apply)" ]; then echo rebase; else echo none; fi`;

/**
 * Lexical confinement of a workspace-relative path given to git (git_diff path, git_add paths):
 * absolute paths and `..` that climb out of the workspace are PERMISSION_DENIED naming the field,
 * before git runs; a NUL or a lone UTF-16 surrogate is INVALID_ARGUMENT. (Symlinks that lead out
 * are git's to refuse; outsideRefusal maps that answer.)
 */
export function confineToWorkspace(field: string, path: string): void {
  const base = field.replace(/\[\d+\]$/, '');
  if (path.includes('\0')) throw new ServiceError('INVALID_ARGUMENT', `${field}: contains a NUL character`, { field: base, path: path });
  if (/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(path))
    throw new ServiceError('INVALID_ARGUMENT', `${field}: ${JSON.stringify(path)} contains a lone UTF-16 surrogate, which no file name can hold`, { field: base, rule: 'well-formed Unicode' });
  if (path.startsWith('/')) throw new ServiceError('PERMISSION_DENIED', `${field}: ${path} is an absolute path and leaves the workspace; paths are relative to the workspace root`, { field: base, path: path });
  const norm = posix.normalize(path);
  if (norm === '..' || norm.startsWith('../')) throw new ServiceError('PERMISSION_DENIED', `${field}: ${path} leaves the workspace`, { field: base, path: path });
}

/** git's own "outside the repository" answers as PERMISSION_DENIED naming the field. */
export function outsideRefusal(field: string, stderr: string): ServiceError | null {
  const m = /fatal: (.*?(?:is outside repository|beyond a symbolic link|outside the repository).*)$/m.exec(stderr);
  return m ? new ServiceError('PERMISSION_DENIED', `${field}: ${m[1]!.replace(/ at '[^']*'$/, '')}: the path leaves the workspace`, { field }) : null;
}
