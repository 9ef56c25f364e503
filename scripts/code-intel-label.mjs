// scripts/code-intel-label: writes the labelled sets of bench/code-intel (bench/data/code-intel-<lang>.json)
// from a checkout, with ctags and plain text rules a reader can follow by hand. Not a benchmark
// (bench/code-intel runs them); run it again only when the bench moves to another commit.
//
//   node scripts/code-intel-label.mjs <checkout> <lang: typescript|python|c> <repo owner/name>
//
// A position is a use of a name that ctags finds defined exactly once in the whole checkout (any
// kind), that is no keyword, global or builtin of the language, at a call `name(` that is not an attribute access (`x.name(`; `self.` and
// `this.` allowed), not on the definition line (nor, in C, a prototype: the call's line has `(`, `=`, `,` or
// `return` before the name, or nothing), not in a comment, a string or a docstring, not on an
// import line. Its label is that one definition (path, 1-based line). For C, uses in the defining
// file only (clangd runs without a background index, so a definition in another translation unit is
// not in its reach: the header's prototype would be the answer). Two uses per name at most, 150 in
// all, spread over the names in path order. References: names whose every whole-word occurrence is
// free of attribute access; the labelled lines are those occurrences in code (the definition's line
// included), for functions and classes of 6 characters or more never assigned, annotated or taken as a
// parameter (`name =`, `name:`, in a def's parameters); the occurrences in comments, strings and docstrings are what a text search adds.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const [dir, lang, repo] = process.argv.slice(2);
if (!dir || !lang || !repo) throw new Error('usage: node scripts/code-intel-label.mjs <checkout> <typescript|python|c> <owner/name>');
const EXT = { typescript: /\.(ts|tsx|mts|js|mjs)$/, python: /\.py$/, c: /\.(c|h)$/ }[lang];
const KINDS = { typescript: /^(function|class|interface|typealias|enum|method|constant)$/, python: /^(function|class|member)$/, c: /^(function|typedef|struct|macro)$/ }[lang];
const commit = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: dir }).toString().trim();
const files = execFileSync('git', ['ls-files'], { cwd: dir }).toString().trim().split('\n').filter((f) => EXT.test(f) && !f.endsWith('.d.ts'));
const tags = execFileSync('ctags', ['--options=NONE', '--output-format=json', '--fields=+nK', '-f', '-', ...files], { cwd: dir, maxBuffer: 1 << 28 }).toString().trim().split('\n').map((l) => JSON.parse(l)).filter((t) => t._type === 'tag');
// Names the language itself owns (keywords, globals, builtins) are no label: a use may be theirs.
const OWNED = new Set(lang === 'python'
  ? execFileSync('python3', ['-c', 'import builtins, keyword; print(" ".join(dir(builtins) + keyword.kwlist))']).toString().trim().split(' ')
  : lang === 'typescript'
    ? [...Object.getOwnPropertyNames(globalThis), 'async', 'await', 'break', 'case', 'catch', 'class', 'const', 'continue', 'default', 'delete', 'else', 'enum', 'export', 'extends', 'false', 'finally', 'function', 'import', 'interface', 'null', 'return', 'static', 'super', 'switch', 'this', 'throw', 'true', 'type', 'typeof', 'void', 'while', 'yield', 'Request', 'Response', 'Headers', 'fetch', 'FormData', 'Blob', 'URL', 'AbortController', 'AbortSignal', 'ReadableStream', 'TextDecoder', 'TextEncoder', 'DOMException', 'setTimeout', 'clearTimeout']
    : ['main', 'sizeof', 'malloc', 'free', 'realloc', 'calloc', 'printf', 'strlen', 'memcpy', 'memset', 'strcmp', 'assert']);
const byName = new Map();
for (const t of tags) byName.set(t.name, [...(byName.get(t.name) ?? []), t]);

/** Each file's lines, with whether each is code (not a comment line, not inside a docstring or block comment). */
const text = new Map();
for (const f of files) {
  const lines = readFileSync(join(dir, f), 'utf8').split('\n');
  let inDoc = false;
  const code = lines.map((l) => {
    const t = l.trim();
    const was = inDoc;
    if (lang === 'python') { if (((l.match(/"""|'''/g) ?? []).length) % 2 === 1) inDoc = !inDoc; }
    else { if (t.includes('/*') && !t.includes('*/')) inDoc = true; else if (inDoc && t.includes('*/')) { inDoc = false; return false; } }
    if (was || (lang === 'python' && /^("""|''')/.test(t))) return false;
    return !/^(#|\/\/|\*|\/\*)/.test(t) || (lang === 'c' && /^#\s*(define|if)/.test(t));
  });
  text.set(f, { lines, code });
}

/** Whether the occurrence at index i of line l is outside a string and a trailing comment. */
function inCode(l, i) {
  const before = l.slice(0, i);
  if ((before.match(/"/g) ?? []).length % 2 || (before.match(/'/g) ?? []).length % 2 || (before.match(/`/g) ?? []).length % 2) return false;
  return !before.includes(lang === 'python' ? '#' : '//');
}
const cp = (s) => Array.from(s).length;
const word = (n) => new RegExp(`(?<![\\w$])${n.replace(/\$/g, '\\$')}(?![\\w$])`, 'g');

const positions = [];
const references = [];
const names = [...byName.entries()].filter(([n, ts]) => ts.length === 1 && KINDS.test(ts[0].kind) && !OWNED.has(n) && n.length >= 4 && /^[A-Za-z_$][\w$]*$/.test(n)).sort(([, a], [, b]) => (a[0].path + a[0].line).localeCompare(b[0].path + b[0].line));
for (const [name, [def]] of names) {
  const uses = [];
  const occ = [];
  let dotted = false;
  let shadowed = false;
  for (const f of lang === 'c' ? [def.path] : files) {
    const { lines, code } = text.get(f);
    lines.forEach((l, k) => {
      for (const m of l.matchAll(word(name))) {
        const prev = l.slice(0, m.index);
        const attr = /\.\s*$/.test(prev) && !/(self|this|cls)\.$/.test(prev);
        if (attr) dotted = true;
        const isCode = code[k] && inCode(l, m.index);
        occ.push({ path: f, line: k + 1, isCode });
        const call = /^\s*\(/.test(l.slice(m.index + name.length)) && (lang !== 'c' || /^\s*$|[(=,]|return/.test(prev));
        const after = l.slice(m.index + name.length);
        if (/^\s*(=[^=]|:)/.test(after) || (/^\s*(def|function|async function)\b.*\(/.test(prev) && !(f === def.path && k + 1 === def.line))) shadowed = true;
        if (isCode && call && !attr && !(f === def.path && k + 1 === def.line) && !/^\s*(import|from|export \{|#include)\b/.test(l)) uses.push({ path: f, line: k + 1, column: cp(prev) + 1, symbol: name, expected: { path: def.path, line: def.line } });
      }
    });
  }
  positions.push(...uses.slice(0, 2));
  const codeLines = [...new Set(occ.filter((o) => o.isCode).map((o) => `${o.path}:${o.line}`))];
  const textLines = [...new Set(occ.map((o) => `${o.path}:${o.line}`))];
  if (!dotted && !shadowed && /^(function|class)$/.test(def.kind) && name.length >= 6 && lang !== 'c' && codeLines.length >= 4 && codeLines.length <= 60 && textLines.length > codeLines.length) {
    const defText = text.get(def.path).lines[def.line - 1];
    references.push({ path: def.path, line: def.line, column: cp(defText.slice(0, defText.search(word(name)))) + 1, symbol: name, lines: codeLines.map((s) => ({ path: s.slice(0, s.lastIndexOf(':')), line: Number(s.slice(s.lastIndexOf(':') + 1)) })), textOnlyLines: textLines.length - codeLines.length });
  }
}
// Spread: every name's first use, then second uses, up to 150.
const firsts = positions.filter((p, i) => i === 0 || positions[i - 1].symbol !== p.symbol);
const seconds = positions.filter((p) => !firsts.includes(p));
const chosen = [...firsts, ...seconds].slice(0, 150).sort((a, b) => a.path.localeCompare(b.path) || a.line - b.line || a.column - b.column);
const out = { repository: `https://github.com/${repo}`, commit, language: lang, how: 'scripts/code-intel-label.mjs (ctags: a name defined exactly once; a call site in code)', positions: chosen, references: references.sort((a, b) => b.textOnlyLines - a.textOnlyLines).slice(0, 8) };
writeFileSync(new URL(`../bench/data/code-intel-${lang}.json`, import.meta.url), JSON.stringify(out, null, 1) + '\n');
console.log(`${lang}: ${chosen.length} positions over ${new Set(chosen.map((p) => p.symbol)).size} names (${names.length} unique names), ${out.references.length} reference sets, commit ${commit}`);
