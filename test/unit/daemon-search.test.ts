/**
 * Host-level tests of the daemon's search methods (src/sandbox/daemon/search/*), its one glob
 * dialect (src/sandbox/daemon/glob.ts) and the overview's descriptor walk, on a temporary directory
 * with the host's ripgrep and Universal Ctags, no sandbox. End to end: test/e2e/files.test.ts.
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { compileGlob, globToRegExp } from '../../src/sandbox/daemon/glob.js';
import { analyseRepository } from '../../src/sandbox/daemon/overview/index.js';
import { workspaceFileMethods } from '../../src/sandbox/daemon/search/index.js';
import { methodCaller } from './daemon-methods.js';

let base: string;
let root: string;
let outside: string;
let methods: ReturnType<typeof workspaceFileMethods>;

const { call, refusal } = methodCaller(() => methods);

function put(files: Record<string, string>): void {
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(dirname(join(root, rel)), { recursive: true });
    writeFileSync(join(root, rel), content);
  }
}

beforeEach(() => {
  base = mkdtempSync(join(tmpdir(), 'atelier-daemon-search-'));
  root = join(base, 'ws');
  outside = join(base, 'outside');
  mkdirSync(root);
  mkdirSync(outside);
  writeFileSync(join(outside, 'secret.ts'), 'export const needle_secret = 1;\n');
  methods = workspaceFileMethods(root);
});
afterEach(() => rmSync(base, { recursive: true, force: true }));

describe('the glob dialect', () => {
  it('`*` and `?` stay within a segment, `**` crosses segments (none included), classes and escapes work', () => {
    const m = (glob: string, path: string) => globToRegExp(glob).test(path);
    expect(m('*.ts', 'a.ts')).toBe(true);
    expect(m('*.ts', 'src/a.ts')).toBe(false);
    expect(m('src/*.ts', 'src/a.ts')).toBe(true);
    expect(m('src/*.ts', 'src/x/a.ts')).toBe(false);
    expect(m('**/*.ts', 'a.ts')).toBe(true);
    expect(m('**/*.ts', 'src/x/y/a.ts')).toBe(true);
    expect(m('src/**/*.py', 'src/a.py')).toBe(true);
    expect(m('src/**/*.py', 'src/p/q/a.py')).toBe(true);
    expect(m('src/**/*.py', 'lib/a.py')).toBe(false);
    expect(m('docs/**', 'docs/a/b.md')).toBe(true);
    expect(m('a?c', 'abc')).toBe(true);
    expect(m('a?c', 'a/c')).toBe(false);
    expect(m('*.[ch]', 'x.h')).toBe(true);
    expect(m('*.[!ch]', 'x.h')).toBe(false);
    expect(m('[Mm]akefile', 'makefile')).toBe(true);
    expect(m('a\\*b', 'a*b')).toBe(true);
    expect(m('a\\*b', 'axb')).toBe(false);
    expect(m('a.b', 'axb')).toBe(false);
  });

  it('has one meaning whichever compiler: the backtracking-free matcher agrees with the RegExp form', () => {
    const m = (glob: string, path: string) => compileGlob(glob).test(path);
    expect(m('**/*.ts', 'src/x/y/a.ts')).toBe(true);
    expect(m('*.ts', 'src/a.ts')).toBe(false);
    expect(m('docs/**', 'docs')).toBe(false);
    expect(m('docs/**', 'docs/a/b.md')).toBe(true);
    expect(m('**', 'a/b')).toBe(true);
    expect(m('a/**/b', 'a/b')).toBe(true);
    expect(m('[a-c]x', 'bx')).toBe(true);
    expect(m('[!a-c]x', 'bx')).toBe(false);
    expect(m('a\\*b', 'a*b')).toBe(true);
    // Random short patterns and paths over a small alphabet: both compilers give the same answer.
    let seed = 42;
    const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n);
    const atoms = ['a', 'b', '*', '?', '/', '**/', '[ab]', '[a-b]', '**'];
    let compared = 0;
    for (let i = 0; i < 3000; i++) {
      const glob = Array.from({ length: 1 + rnd(6) }, () => atoms[rnd(atoms.length)]).join('');
      if (glob.includes('//') || glob.startsWith('/') || glob.endsWith('/')) continue;
      const path = Array.from({ length: 1 + rnd(4) }, () => Array.from({ length: 1 + rnd(3) }, () => 'ab'[rnd(2)]).join('')).join('/');
      expect([glob, path, compileGlob(glob).test(path)]).toEqual([glob, path, globToRegExp(glob).test(path)]);
      compared++;
    }
    expect(compared).toBeGreaterThan(1000);
  });

  it('matches hostile .gitignore-style patterns in bounded time (no backtracking blow-up)', () => {
    const started = Date.now();
    const nested = compileGlob('*a'.repeat(60) + '*b');
    expect(nested.test('a'.repeat(250))).toBe(false);
    const deep = compileGlob('**/'.repeat(200) + '*a*a*a*a*a*a*a*a*b');
    expect(deep.test(('a'.repeat(30) + '/').repeat(60) + 'a'.repeat(200))).toBe(false);
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('compiles hostile patterns in linear time', () => {
    const started = Date.now();
    const re = globToRegExp('**/'.repeat(200) + '*'.repeat(200) + 'x');
    re.test('a/'.repeat(50) + 'b'.repeat(5000));
    expect(Date.now() - started).toBeLessThan(2000);
    expect(globToRegExp('[').test('[')).toBe(true);
    expect(globToRegExp('(a|b)+{1}$^').test('(a|b)+{1}$^')).toBe(true);
  });
});

describe('search.grep and search.references', () => {
  it('greps with a regex, a path and a glob, honours .gitignore, and never searches .git', async () => {
    put({
      'src/a.ts': 'const x = 1;\nfunction needle_one() {}\n',
      'src/deep/b.ts': 'needle_two();\n',
      'src/c.py': 'needle_three = 3\n',
      'ignored/d.ts': 'needle_ignored\n',
      '.gitignore': 'ignored/\n',
      '.git/config': 'needle_git\n',
    });
    const all = await call('search.grep', { pattern: 'needle_\\w+' });
    expect(all.results.map((r) => `${r.file}:${r.line}:${r.column}`).sort()).toEqual(['src/a.ts:2:10', 'src/c.py:1:1', 'src/deep/b.ts:1:1']);
    const ts = await call('search.grep', { pattern: 'needle', glob: '**/*.ts' });
    expect(ts.results.map((r) => r.file).sort()).toEqual(['src/a.ts', 'src/deep/b.ts']);
    const under = await call('search.grep', { pattern: 'needle', path: 'src/deep' });
    expect(under).toMatchObject({ path: 'src/deep', count: 1, truncated: false });
    const refs = await call('search.references', { symbol: 'needle_one' });
    expect(refs).toMatchObject({ symbol: 'needle_one', count: 1 });
    const limited = await call('search.grep', { pattern: 'needle', maxResults: 1 });
    expect(limited).toMatchObject({ count: 1, truncated: true });
  });

  it('refuses a bad pattern, `..` and paths outside, and never follows a symlink out of the root', async () => {
    put({ 'in.ts': 'needle_inside\n' });
    symlinkSync(outside, join(root, 'linked'));
    symlinkSync(join(outside, 'secret.ts'), join(root, 'secret-link.ts'));
    const r = await call('search.grep', { pattern: 'needle_' });
    expect(r.results.map((m) => m.file)).toEqual(['in.ts']);
    expect((await refusal('search.grep', { pattern: 'needle', path: 'linked' })).code).toBe('PERMISSION_DENIED');
    expect((await refusal('search.grep', { pattern: 'needle', path: '../outside' })).code).toBe('PERMISSION_DENIED');
    expect((await refusal('search.grep', { pattern: '(unclosed' })).details.field).toBe('pattern');
    expect((await refusal('search.grep', { pattern: '' })).details.field).toBe('pattern');
    expect((await refusal('search.grep', { pattern: 'x', glob: 'g'.repeat(513) })).details.field).toBe('glob');
    expect((await refusal('search.grep', { pattern: 'x', maxResults: 501 })).details.field).toBe('maxResults');
  });

  it('cuts a huge line to a window around the match and searches deep trees', async () => {
    const deep = Array.from({ length: 120 }, (_, i) => `d${i}`).join('/');
    put({ 'long.txt': 'a'.repeat(200_000) + 'needle_long' + 'b'.repeat(10_000) + '\n', [`${deep}/f.txt`]: 'needle_deep\n' });
    const long = await call('search.grep', { pattern: 'needle_long' });
    expect(long.results[0]).toMatchObject({ file: 'long.txt', textTruncated: true });
    expect(long.results[0]!.text.length).toBeLessThanOrEqual(1000);
    expect(long.results[0]!.text).toContain('needle_long');
    const d = await call('search.grep', { pattern: 'needle_deep' });
    expect(d.results.map((m) => m.file)).toEqual([`${deep}/f.txt`]);
  });
});

describe('search.symbols', () => {
  it('finds definitions by name and language, sees a write through fs.write at once, and skips links out', async () => {
    put({ 'src/m.ts': 'export function computeTotal(x: number) { return x; }\nexport class Widget {}\n', 'lib/m.py': 'def compute_total(x):\n    return x\n' });
    symlinkSync(outside, join(root, 'linked'));
    const r = await call('search.symbols', { query: 'compute' });
    expect(r.symbols.map((s) => `${s.file}:${s.name}:${s.kind}`).sort()).toEqual(['lib/m.py:compute_total:function', 'src/m.ts:computeTotal:function']);
    const py = await call('search.symbols', { query: 'compute', language: 'py' });
    expect(py.symbols.map((s) => s.file)).toEqual(['lib/m.py']);
    expect((await call('search.symbols', { query: 'needle_secret' })).count).toBe(0);
    await call('fs.write', { path: 'src/new.ts', content: 'export function freshlyAdded() {}\n' });
    expect((await call('search.symbols', { query: 'freshlyAdded' })).symbols[0]).toMatchObject({ file: 'src/new.ts', line: 1 });
    expect((await refusal('search.symbols', { query: 'x', path: '../outside' })).code).toBe('PERMISSION_DENIED');
  });
});

describe('the overview walks by descriptor', () => {
  const opts = { clientProfile: 'all' as const, include: ['instructions' as const, 'languages' as const, 'skills' as const], contentMode: 'excerpt' as const, maxBytes: 32768 };

  it('reads nothing through a symlinked directory in the middle of a path that leaves the root', async () => {
    mkdirSync(join(outside, 'rules'), { recursive: true });
    writeFileSync(join(outside, 'rules/evil.md'), 'OUTSIDE RULE');
    writeFileSync(join(outside, 'copilot-instructions.md'), 'OUTSIDE COPILOT');
    mkdirSync(join(outside, 'skills/evil'), { recursive: true });
    writeFileSync(join(outside, 'skills/evil/SKILL.md'), '---\nname: evil\n---\n');
    symlinkSync(outside, join(root, '.github')); // .github/copilot-instructions.md would be outside
    mkdirSync(join(root, '.cursor'));
    symlinkSync(join(outside, 'rules'), join(root, '.cursor/rules'));
    symlinkSync(outside, join(root, '.claude'));
    put({ 'AGENTS.md': 'inside agents', 'src/a.ts': 'x' });
    const ov = await analyseRepository({ root, ...opts });
    expect(ov.instructions!.map((f) => f.path)).toEqual(['AGENTS.md']);
    expect(JSON.stringify(ov)).not.toContain('OUTSIDE');
    expect(ov.skills).toEqual([]);
    expect(ov.languages).toEqual([{ language: 'TypeScript', files: 1, share: 1 }]);
  });

  it('follows links that stay inside, each real skill directory once, and walks deep trees', async () => {
    const deep = Array.from({ length: 60 }, (_, i) => `d${i}`).join('/');
    put({ [`${deep}/AGENTS.md`]: 'deep agents', 'skills/ops/deploy/SKILL.md': '---\nname: deploy\n---\n', 'docs/real.md': 'real claude' });
    mkdirSync(join(root, '.agents/skills'), { recursive: true });
    symlinkSync(join(root, 'skills/ops/deploy'), join(root, '.agents/skills/deploy-link'));
    symlinkSync('docs/real.md', join(root, 'CLAUDE.md'));
    const ov = await analyseRepository({ root, ...opts });
    expect(ov.instructions!.map((f) => f.path)).toEqual(['CLAUDE.md', `${deep}/AGENTS.md`]);
    expect(ov.instructions![0]!.excerpt).toBe('real claude');
    expect(ov.skills!.map((s) => s.name)).toEqual(['deploy']);
  });
});
