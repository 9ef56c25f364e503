/** Parsers of GitService (src/services/git/local.ts): porcelain v2 status and push porcelain. */
import { describe, expect, it } from 'vitest';
import { parsePushPorcelain, parseStatusV2 } from '../../src/services/git/local.js';

describe('parseStatusV2', () => {
  it('reads branch headers and every entry kind, including renames and paths with spaces', () => {
    const out = [
      '# branch.oid 1111111111111111111111111111111111111111',
      '# branch.head main',
      '# branch.upstream origin/main',
      '# branch.ab +2 -1',
      '1 .M N... 100644 100644 100644 aaa bbb README.md',
      '1 A. N... 000000 100644 100644 000 ccc d/new file.txt',
      '2 R. N... 100644 100644 100644 ddd ddd R100 to name.txt',
      'from name.txt',
      'u UU N... 100644 100644 100644 100644 e1 e2 e3 conflict.txt',
      '? untracked one.txt',
      '',
    ].join('\0');
    const s = parseStatusV2(out);
    expect(s).toMatchObject({ headOid: '1'.repeat(40), branch: 'main', upstream: 'origin/main', ahead: 2, behind: 1 });
    expect(s.entries).toEqual([
      { path: 'README.md', index: '.', worktree: 'M', kind: 'changed' },
      { path: 'd/new file.txt', index: 'A', worktree: '.', kind: 'changed' },
      { path: 'to name.txt', origPath: 'from name.txt', index: 'R', worktree: '.', kind: 'renamed' },
      { path: 'conflict.txt', index: 'U', worktree: 'U', kind: 'unmerged' },
      { path: 'untracked one.txt', index: '?', worktree: '?', kind: 'untracked' },
    ]);
  });

  it('reports a detached HEAD and an unborn branch', () => {
    expect(parseStatusV2('# branch.oid (initial)\0# branch.head (detached)\0')).toMatchObject({ headOid: null, branch: null, upstream: null, ahead: null });
  });
});

describe('parsePushPorcelain', () => {
  it('reads flags, refs and summaries', () => {
    const out = 'To https://h/r.git\n!\tHEAD:refs/heads/main\t[rejected] (stale info)\n*\tabc:refs/heads/x\t[new branch]\n-\t:refs/heads/y\t[deleted]\nDone\n';
    expect(parsePushPorcelain(out)).toEqual([
      { flag: '!', from: 'HEAD', to: 'refs/heads/main', summary: '[rejected] (stale info)' },
      { flag: '*', from: 'abc', to: 'refs/heads/x', summary: '[new branch]' },
      { flag: '-', from: '', to: 'refs/heads/y', summary: '[deleted]' },
    ]);
  });
});
