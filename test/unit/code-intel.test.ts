/**
 * Code intelligence (issue #44), the pure pieces: the unified diff of a rename preview (checked by
 * `patch` itself, which must apply it and give the new text), column conversion between code points
 * and UTF-16, edit application, and the clangd compilation database the daemon writes (plugin
 * flags dropped, entries outside the checkout removed, hostile and huge input).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { unifiedDiff } from '../../src/services/code-intel/diff.js';
import { Lines, occurrences } from '../../src/sandbox/daemon/lsp/positions.js';
import { applyEdits } from '../../src/sandbox/daemon/lsp/methods.js';
import { prepareClangdDatabase, sanitizeArgs, splitCommand } from '../../src/sandbox/daemon/lsp/clangd.js';
import { Confinement } from '../../src/sandbox/daemon/files/index.js';
import { validateSections } from '../../src/core/config.js';

const dir = mkdtempSync(join(tmpdir(), 'code-intel-unit-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function patchApplies(before: string, after: string): string {
  const f = join(dir, 'file.txt');
  writeFileSync(f, before);
  const diff = unifiedDiff('file.txt', before, after);
  execFileSync('patch', ['-s', '-p1', '-d', dir], { input: diff });
  return readFileSync(f, 'utf8');
}

describe('rename preview diff', () => {
  it('is a unified diff that patch applies to give the new text', () => {
    const lines = Array.from({ length: 60 }, (_, i) => `line ${i} foo`);
    const before = lines.join('\n') + '\n';
    const after = lines.map((l, i) => (i % 17 === 3 ? l.replace('foo', 'bar') : l)).join('\n') + '\n';
    expect(patchApplies(before, after)).toBe(after);
    const d = unifiedDiff('a.ts', 'x\ny\nz\n', 'x\nY\nz\n');
    expect(d).toBe('--- a/a.ts\n+++ b/a.ts\n@@ -1,3 +1,3 @@\n x\n-y\n+Y\n z\n');
    expect(patchApplies('', 'new\n')).toBe('new\n');
    expect(patchApplies('a\nb\n', 'a\nb\nc\nd\n')).toBe('a\nb\nc\nd\n');
    expect(patchApplies('a\nb\nc\n', 'c\n')).toBe('c\n');
  });
});

describe('positions', () => {
  it('columns count code points; LSP characters are UTF-16 units', () => {
    const l = new Lines("const s = '🎉 ' + x;\r\nnext\n");
    expect(l.line(0)).toBe("const s = '🎉 ' + x;");
    // "x" is the 18th code point, the 19th UTF-16 unit (the emoji is two).
    expect(l.toLsp({ line: 1, column: 18 })).toEqual({ line: 0, character: 18 });
    expect(l.fromLsp({ line: 0, character: 18 })).toEqual({ line: 1, column: 18 });
    expect(() => l.toLsp({ line: 1, column: 40 })).toThrow(/column: 40 is past the end of line 1/);
    expect(() => l.toLsp({ line: 9, column: 1 })).toThrow(/line: 9 is past the end/);
    expect(occurrences(new Lines('foo foobar _foo foo.x $foo'), 'foo')).toEqual([{ line: 0, character: 0 }, { line: 0, character: 16 }]);
  });

  it('applies edits from the last to the first and refuses overlapping ones', () => {
    const text = 'let a = 1;\nuse(a, a);\n';
    const e = (l1: number, c1: number, l2: number, c2: number, t: string) => ({ range: { start: { line: l1, character: c1 }, end: { line: l2, character: c2 } }, newText: t });
    expect(applyEdits(text, [e(0, 4, 0, 5, 'bb'), e(1, 4, 1, 5, 'bb'), e(1, 7, 1, 8, 'bb')], 'x')).toBe('let bb = 1;\nuse(bb, bb);\n');
    expect(() => applyEdits(text, [e(0, 0, 0, 5, 'x'), e(0, 3, 0, 6, 'y')], 'x')).toThrow(/overlapping/);
  });
});

describe('clangd compilation database', () => {
  it('drops every flag that loads code, keeps the rest, and removes entries outside the checkout', () => {
    expect(sanitizeArgs(['cc', '-fplugin=/x.so', '-Xclang', '-load', '-Xclang', '/x.so', '-fpass-plugin=/y.so', '-mllvm', '-z', '-load', '/z.so', '-plugin', 'p', '-plugin-arg-p-a', '-O2', '-Iinc', '-c', 'a.c'])).toEqual({ args: ['cc', '-O2', '-Iinc', '-c', 'a.c'], removed: 13 });
    expect(splitCommand(`cc -DX="a b" 'q r' a\\ b.c`)).toEqual(['cc', '-DX=a b', 'q r', 'a b.c']);
    const root = join(dir, 'repo');
    mkdirSync(join(root, 'src'), { recursive: true });
    writeFileSync(
      join(root, 'compile_commands.json'),
      JSON.stringify([
        { directory: root, file: 'src/a.c', command: 'cc -fplugin=/evil.so -Xclang -load -Xclang /evil.so -c src/a.c' },
        { directory: '/', file: 'etc/passwd', arguments: ['cc', 'etc/passwd'] },
        { directory: root, file: '../../outside.c', arguments: ['cc', 'x.c'] },
        'junk',
        null,
        { directory: root, file: 'src/b.c', arguments: ['cc', '-c', 'src/b.c'] },
      ]),
    );
    const out = join(dir, 'db');
    const db = prepareClangdDatabase(new Confinement(root), out);
    expect(db).toMatchObject({ source: 'compile_commands.json', entries: 2, removedFlags: 7 });
    const written = JSON.parse(readFileSync(join(out, 'compile_commands.json'), 'utf8'));
    expect(written.map((e: { arguments: string[] }) => e.arguments)).toEqual([['cc', '-c', 'src/a.c'], ['cc', '-c', 'src/b.c']]);
    // Malformed: fallback flags, said in a note.
    writeFileSync(join(root, 'compile_commands.json'), '{not json');
    expect(prepareClangdDatabase(new Confinement(root), out)).toMatchObject({ entries: 0, note: expect.stringContaining('not valid JSON') });
    // compile_flags.txt: relative include paths made absolute, plugin flags dropped.
    rmSync(join(root, 'compile_commands.json'));
    writeFileSync(join(root, 'compile_flags.txt'), '-Iinclude\n-fplugin=/evil.so\n-DX=1\n');
    expect(prepareClangdDatabase(new Confinement(root), out)).toMatchObject({ source: 'compile_flags.txt', removedFlags: 1 });
    expect(readFileSync(join(out, 'compile_flags.txt'), 'utf8')).toBe(`-I${join(root, 'include')}\n-DX=1\n`);
    // A symlinked database leaving the checkout is not read.
    rmSync(join(root, 'compile_flags.txt'));
    execFileSync('ln', ['-s', '/etc/hostname', join(root, 'compile_commands.json')]);
    expect(prepareClangdDatabase(new Confinement(root), out)).toMatchObject({ source: '', entries: 0 });
  });
});

describe('operator servers in the config file', () => {
  it('are checked at start-up, naming the setting and the rule', () => {
    const ok = { codeIntel: { servers: [{ name: 'rust', command: '/usr/bin/rust-analyzer', extensions: { '.rs': 'rust' } }] } };
    expect(() => validateSections(ok, 'c.json')).not.toThrow();
    const bad = (v: unknown) => () => validateSections({ codeIntel: v }, 'c.json');
    expect(bad([])).toThrow(/"codeIntel" must be an object/);
    expect(bad({ other: 1 })).toThrow(/"codeIntel.other" is not a setting/);
    expect(bad({ servers: [{ name: 'x', command: 'rust-analyzer', extensions: { '.rs': 'rust' } }] })).toThrow(/"codeIntel.servers\[0\].command" must be an absolute path/);
    expect(bad({ servers: [{ name: 'Bad Name', command: '/x', extensions: { '.rs': 'rust' } }] })).toThrow(/servers\[0\].name/);
    expect(bad({ servers: [{ name: 'x', command: '/x', extensions: { rs: 'rust' } }] })).toThrow(/an extension is a dot/);
    expect(bad({ servers: [{ name: 'x', command: '/x', extensions: { '.rs': 'rust' }, shell: true }] })).toThrow(/unknown key "shell"/);
    expect(bad({ servers: [{ name: 'x', command: '/x', extensions: { '.rs': 'rust' } }, { name: 'x', command: '/y', extensions: { '.go': 'go' } }] })).toThrow(/repeats x/);
  });
});
