// scripts/code-intel-label: writes the labelled sets of bench/code-intel (bench/data/code-intel-<lang>.json)
// from a checkout, with ctags, the C preprocessor and plain text rules a reader can follow by hand. Not
// a benchmark (bench/code-intel runs them; `node bench/code-intel.mjs --labels-only` checks them against
// the bare servers); run it again only when the bench moves to another commit.
//
//   node scripts/code-intel-label.mjs <checkout> <lang: typescript|python|c> <repo owner/name> [--why]
//     --why: every name left out, with the rule that left it out, on stderr.
//
// "Code" below is text outside comments and strings (docstrings included), by a small lexer per
// language: f-string `{...}` (Python) and template `${...}` (TypeScript) are code. "Occurrence" is a
// whole-word match of the name anywhere in the checkout's files of the language.
//
// NAMES. A name is labelled only when all of these hold:
//  N1 ctags finds it defined exactly once in the checkout (kinds: TypeScript function, class, interface,
//     type alias, enum, method, constant; Python function, class, member; C function, typedef, struct,
//     macro), it has 4 characters or more and is no keyword, global or builtin of the language.
//  N2 ctags' line declares it by text (ctags also tags object-literal keys and numbers as TS constants):
//     TS `function|class|interface|type|enum|namespace|const|let|var NAME`, or for a method `NAME(` /
//     `NAME<` first on the line (after modifiers); Python `def|class NAME`; C a `#define NAME` for a
//     macro, `NAME(` for a function, NAME on the line otherwise.
//  N3 (TS, Python) no occurrence in code is also something else: an attribute access `x.NAME`
//     (`this.`, `self.`, `cls.` allowed: a member of another object or type), a key, property,
//     annotation or parameter `NAME:` / `NAME?:` where one is declared (first on the line, after `(`
//     `,` and in TS `{` `;` or a modifier; not `? NAME :`, `case NAME:`, `-> NAME:`, `{NAME: v}` in
//     Python, which are uses), an assignment, keyword argument or default `NAME =`,
//     a method or accessor written in an object or class `NAME(...) {` / `NAME(...):` /
//     `get|set|async|static NAME(` off ctags' line, a local binding (TS `const|let|var NAME`,
//     `{... NAME ...} =`, `NAME =>`; Python `for|as|lambda|global|nonlocal NAME`, a `def`'s parameter).
//  N4 (TS, Python) no file imports it (its local binding) from a module outside the checkout: TS a
//     specifier not starting with `.` or `/`; Python a module whose first component is no package or
//     module at the checkout's root, under src/, or beside the importing file (relative ones are in).
//  N5 (C) ctags' line is active (P3).
//
// POSITIONS. A use of a labelled name is a position when:
//  P1 it is a call `NAME(` in code, not an attribute access (`x.NAME(`; `this.`, `self.` and `cls.`
//     allowed), not on a line of the name's declarations (D1), not on an import or #include line; in C
//     the call's line has `(`, `=`, `,` or `return` before the name, or nothing (not a prototype).
//  P2 (Python) it is not inside an if/elif/else chain whose conditions test the platform or the Python
//     version (`sys.platform`, `os.name`, `sys.version_info`, or a module-level name assigned from one
//     of them, as click's WIN), whichever branch Linux takes, nor after an `assert` of such a test in
//     the same block: pyright leaves unreachable branches unanalysed (it answers nothing there).
//  P3 (C) it is in the defining file (clangd runs without a background index: a definition in another
//     translation unit is not in its reach, the header's prototype would be the answer) and on an
//     active line: one the preprocessor keeps when that file is the main file with clangd's fallback
//     flags (gcc -E, no -D or -I but clang's own predefined __clang__ and __GNUC__ 4.2; a .h as
//     clangd parses one, -x objective-c++-header, here -x c++ -D__OBJC__). Directive lines, so every
//     macro body, and #if/#ifdef blocks not active by default are not active; so is everything after
//     an #include these flags do not find (gcc stops there: unity's own tests, which need -I).
//     A macro's definition (N5) is active where gcc -dD keeps its #define.
//  D1 Its label is the definition (path, 1-based line: ctags' line). A TS overload set (several
//     `function NAME` / method `NAME(` declarations in the defining file, consecutive signatures and the
//     implementation) is labelled with its first declaration as `expected.line` and every declaration
//     as `expected.lines`: tsserver lands on the overload the call resolves to; any of them is right.
//  Two uses per name at most, 150 in all, spread over the names in path order (every name's first
//  use, then second uses).
//
// REFERENCES. A reference set is a name labelled as above (N1-N5) of kind function or class (TS also
// a constant whose value is an arrow function or function expression; C a `static` function in a .c
// file), of 6 characters or more, with 4 to 60 lines holding it in code, and:
//  R1 every occurrence in code lies in the files the server's own project covers, so the answer
//     does not hang on which files happen to be open: TS, tsconfig.json's `include` (ky: source/);
//     Python, pyproject.toml's [tool.pyright] `include` (click: src, tests/typing); C, the defining .c
//     file (a static function has internal linkage: clangd without an index answers references within
//     the open translation unit, and no other file names it);
//  R2 every such occurrence is on an analysed line (P2, P3: none in a macro body or an inactive block).
//  The labelled lines are those lines (the definition's and, in C, a forward declaration's included).
//  The 8 with the most text-only lines (lines holding the name only in comments or strings: what a
//  text search adds), then the most labelled lines, are kept.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';

const [dir, lang, repo] = process.argv.slice(2);
if (!dir || !lang || !repo) throw new Error('usage: node scripts/code-intel-label.mjs <checkout> <typescript|python|c> <owner/name>');
const EXT = { typescript: /\.(ts|tsx|mts|js|mjs)$/, python: /\.py$/, c: /\.(c|h)$/ }[lang];
const KINDS = { typescript: /^(function|class|interface|typealias|enum|method|constant)$/, python: /^(function|class|member)$/, c: /^(function|typedef|struct|macro)$/ }[lang];
const commit = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: dir }).toString().trim();
const files = execFileSync('git', ['ls-files'], { cwd: dir }).toString().trim().split('\n').filter((f) => EXT.test(f) && !f.endsWith('.d.ts'));
const tags = execFileSync('ctags', ['--options=NONE', '--output-format=json', '--fields=+nKZ', '-f', '-', ...files], { cwd: dir, maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim().split('\n').map((l) => JSON.parse(l)).filter((t) => t._type === 'tag');
// N1: names the language itself owns (keywords, globals, builtins): a use may be theirs.
const JS_WORDS = 'abstract any as assert asserts async await bigint boolean break case catch class const constructor continue debugger declare default delete do else enum export extends false finally for from function get global if implements import in infer instanceof interface is keyof let module namespace never new null number object of override package private protected public readonly require return satisfies set static string super switch symbol this throw true try type typeof undefined unique unknown var void while with yield';
const OWNED = new Set(lang === 'python'
  ? execFileSync('python3', ['-c', 'import builtins, keyword; print(" ".join(dir(builtins) + keyword.kwlist + keyword.softkwlist))']).toString().trim().split(' ')
  : lang === 'typescript'
    ? [...Object.getOwnPropertyNames(globalThis), ...JS_WORDS.split(' '), 'Request', 'Response', 'Headers', 'fetch', 'FormData', 'Blob', 'File', 'URL', 'URLSearchParams', 'AbortController', 'AbortSignal', 'ReadableStream', 'WritableStream', 'TransformStream', 'TextDecoder', 'TextEncoder', 'DOMException', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'window', 'document', 'navigator', 'self']
    : ['main', 'sizeof', 'malloc', 'free', 'realloc', 'calloc', 'printf', 'strlen', 'memcpy', 'memset', 'strcmp', 'assert', 'defined']);
const byName = new Map();
for (const t of tags) byName.set(t.name, [...(byName.get(t.name) ?? []), t]);

/** Per character of a file: 1 in code, 0 in a comment or a string (see the header). */
function codeMask(s) {
  const mask = new Uint8Array(s.length);
  let i = 0;
  // A stack of what encloses the code being read: a brace depth inside a template or f-string expression.
  const stack = [];
  const str = (q, triple, f) => {
    // From i (just past the opening quote[s]) to the closing quote; f-string `{` opens code.
    while (i < s.length) {
      const c = s[i];
      if (c === '\\') { i += 2; continue; }
      if (!triple && c === '\n') return;
      if (triple ? s.startsWith(q.repeat(3), i) : c === q) { i += triple ? 3 : 1; return; }
      if (f && c === '{') {
        if (s[i + 1] === '{') { i += 2; continue; }
        i++;
        return 'expr';
      }
      i++;
    }
  };
  // Resumes a string after its `{...}`/`${...}` expression closed.
  const frames = [];
  const code = () => {
    while (i < s.length) {
      const c = s[i];
      if (lang === 'python' && c === '#') { while (i < s.length && s[i] !== '\n') i++; continue; }
      if (lang !== 'python' && c === '/' && s[i + 1] === '/') { while (i < s.length && s[i] !== '\n') i++; continue; }
      if (lang !== 'python' && c === '/' && s[i + 1] === '*') { const e = s.indexOf('*/', i + 2); i = e < 0 ? s.length : e + 2; continue; }
      if (lang === 'typescript' && c === '/' && /[(,=:[!&|?{};]\s*$|^\s*$|\breturn\s*$/.test(s.slice(Math.max(0, i - 40), i).split('\n').pop())) {
        // A regular expression literal.
        let j = i + 1;
        let cls = false;
        while (j < s.length && s[j] !== '\n') {
          if (s[j] === '\\') { j += 2; continue; }
          if (s[j] === '[') cls = true;
          else if (s[j] === ']') cls = false;
          else if (s[j] === '/' && !cls) break;
          j++;
        }
        if (s[j] === '/') { i = j + 1; continue; }
      }
      if (c === '{') { stack.push('{'); mask[i++] = 1; continue; }
      if (c === '}') {
        if (stack.length && stack[stack.length - 1] === '{') { stack.pop(); mask[i++] = 1; continue; }
        if (stack.length) { stack.pop(); i++; resume(frames.pop()); continue; }
      }
      let m;
      if (lang === 'python' && (m = /^([rRbBuUfF]{0,2})('''|"""|'|")/.exec(s.slice(i, i + 5))) && !(m[1] && /\w/.test(s[i - 1] ?? ''))) {
        const f = /f/i.test(m[1]);
        i += m[0].length;
        resume({ q: m[2][0], triple: m[2].length === 3, f });
        continue;
      }
      if (lang !== 'python' && (c === '"' || c === "'" || c === '`')) {
        i++;
        resume({ q: c, triple: false, f: c === '`' && lang === 'typescript', tpl: c === '`' });
        continue;
      }
      mask[i++] = 1;
    }
  };
  const resume = (fr) => {
    const open = fr.tpl ? tplStr() : str(fr.q, fr.triple, fr.f);
    if (open === 'expr') { stack.push('s'); frames.push(fr); }
  };
  const tplStr = () => {
    while (i < s.length) {
      const c = s[i];
      if (c === '\\') { i += 2; continue; }
      if (c === '`') { i++; return; }
      if (c === '$' && s[i + 1] === '{') { i += 2; return 'expr'; }
      i++;
    }
  };
  code();
  return mask;
}

/** Each file's text, lines, line starts and code mask. */
const text = new Map();
for (const f of files) {
  const s = readFileSync(join(dir, f), 'utf8');
  const lines = s.split('\n');
  const starts = [0];
  for (const l of lines) starts.push(starts[starts.length - 1] + l.length + 1);
  text.set(f, { s, lines, starts, mask: codeMask(s) });
}
const lineOf = (t, off) => {
  let lo = 0;
  let hi = t.starts.length - 1;
  while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (t.starts[mid] <= off) lo = mid; else hi = mid - 1; }
  return lo;
};

// P2 (Python): lines pyright leaves unanalysed on Linux; P3 (C): lines the preprocessor keeps.
const inactive = new Map();
if (lang === 'python') {
  const platformNames = new Set();
  for (const f of files) for (const m of text.get(f).s.matchAll(/^([A-Za-z_]\w*)\s*=.*\b(sys\.platform|os\.name|sys\.version_info)\b/gm)) platformNames.add(m[1]);
  const PLATFORM = new RegExp(`\\b(sys\\.platform|os\\.name|sys\\.version_info${[...platformNames].map((n) => `|${n}`).join('')})\\b`);
  for (const f of files) {
    const { lines } = text.get(f);
    const off = new Set();
    const indent = (l) => l.match(/^\s*/)[0].length;
    const blank = (l) => /^\s*(#.*)?$/.test(l);
    // The end (exclusive) of the block under a header at indent n whose header ends on line j.
    const blockEnd = (j, n) => { let k = j + 1; while (k < lines.length && (blank(lines[k]) || indent(lines[k]) > n)) k++; return k; };
    const headerEnd = (i) => { let j = i; while (j < lines.length - 1 && !/:\s*(#.*)?$/.test(lines[j])) j++; return j; };
    for (let i = 0; i < lines.length; i++) {
      const m = /^(\s*)(if|assert)\b/.exec(lines[i]);
      if (!m || !text.get(f).mask[text.get(f).starts[i] + m[1].length]) continue;
      const n = m[1].length;
      if (m[2] === 'assert') {
        if (!PLATFORM.test(lines[i])) continue;
        let k = i + 1;
        while (k < lines.length && (blank(lines[k]) || indent(lines[k]) >= n)) k++;
        for (let x = i; x < k; x++) off.add(x + 1);
        continue;
      }
      // The chain: if, its elif's and else at the same indent.
      let platform = false;
      let j = headerEnd(i);
      platform ||= PLATFORM.test(lines.slice(i, j + 1).join(' '));
      let end = blockEnd(j, n);
      while (end < lines.length && indent(lines[end]) === n && /^\s*(elif|else)\b/.test(lines[end])) {
        const h = end;
        j = headerEnd(h);
        if (/^\s*elif\b/.test(lines[h])) platform ||= PLATFORM.test(lines.slice(h, j + 1).join(' '));
        end = blockEnd(j, n);
      }
      if (platform) for (let x = i; x < end; x++) off.add(x + 1);
    }
    inactive.set(f, off);
  }
}
const activeC = new Map();
if (lang === 'c') {
  for (const f of files) {
    const header = f.endsWith('.h');
    // -dD keeps each #define in the output, at its line: a macro's definition is active where its #define is.
    const args = ['-E', '-dD', ...(header ? ['-x', 'c++', '-D__OBJC__=1'] : ['-x', 'c']), '-D__clang__=1', '-U__GNUC__', '-D__GNUC__=4', '-U__GNUC_MINOR__', '-D__GNUC_MINOR__=2', '-w', f];
    let out = '';
    try { out = execFileSync('gcc', args, { cwd: dir, maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'ignore'] }).toString(); } catch (e) { out = e.stdout?.toString() ?? ''; }
    const active = new Set();
    const defines = new Set();
    let cur = null;
    let line = 0;
    for (const l of out.split('\n')) {
      const m = /^# (\d+) "((?:[^"\\]|\\.)*)"/.exec(l);
      if (m) { cur = m[2]; line = Number(m[1]); continue; }
      if (cur === f && /^#\s*(define|undef)\b/.test(l)) defines.add(line);
      else if (cur === f && l.trim()) active.add(line);
      line++;
    }
    activeC.set(f, { active, defines });
  }
}
const analysed = (f, line) => (lang === 'python' ? !inactive.get(f).has(line) : lang === 'c' ? activeC.get(f).active.has(line) : true);
/** N5: a C definition's line is active (a macro's: its #define is kept). */
const defActive = (def) => (def.kind === 'macro' ? activeC.get(def.path).defines.has(def.line) : activeC.get(def.path).active.has(def.line));

// N4: local bindings imported from outside the checkout.
const outsideImports = new Set();
const pyTop = new Set();
if (lang === 'python') {
  for (const f of files) {
    const parts = f.split('/');
    // A top-level module or package: at the root, under src/, or (for a file's neighbours) beside it.
    if (parts.length === 1) pyTop.add(parts[0].replace(/\.py$/, ''));
    if (parts.length >= 2 && existsSync(join(dir, parts[0], '__init__.py'))) pyTop.add(parts[0]);
    if (parts[0] === 'src' && parts.length >= 2) pyTop.add(parts[1].replace(/\.py$/, ''));
  }
}
for (const f of files) {
  const { s, mask } = text.get(f);
  if (lang === 'typescript') {
    for (const m of s.matchAll(/\bimport\s+(?:type\s+)?([\w$\s{},*]*?)\s*from\s*['"]([^'"]+)['"]/g)) {
      if (!mask[m.index] || /^[./]/.test(m[2])) continue;
      for (const b of m[1].replace(/[{}]/g, ',').split(',')) {
        const local = b.trim().split(/\s+as\s+/).pop().replace(/^\*\s*/, '').replace(/^type\s+/, '').trim();
        if (local) outsideImports.add(local);
      }
    }
  } else if (lang === 'python') {
    const beside = new Set(files.filter((g) => dirname(g) === dirname(f)).map((g) => posix.basename(g).replace(/\.py$/, '')));
    const inside = (mod) => mod.startsWith('.') || pyTop.has(mod.split('.')[0]) || beside.has(mod.split('.')[0]);
    for (const m of s.matchAll(/^[ \t]*from\s+([\w.]+)\s+import\s+(\([^)]*\)|[^\n]*)/gm)) {
      if (!mask[m.index + m[0].indexOf('from')] || inside(m[1])) continue;
      for (const b of m[2].replace(/[()\\]/g, '').replace(/#.*$/gm, '').split(',')) {
        const local = b.trim().split(/\s+as\s+/).pop().trim();
        if (local) outsideImports.add(local);
      }
    }
    for (const m of s.matchAll(/^[ \t]*import\s+([^\n]+)/gm)) {
      if (!mask[m.index + m[0].indexOf('import')]) continue;
      for (const b of m[1].replace(/#.*$/, '').split(',')) {
        const [mod, alias] = b.trim().split(/\s+as\s+/);
        if (mod && !inside(mod)) outsideImports.add(alias ?? mod.split('.')[0]);
      }
    }
  }
}

// R1: the files the server's own project covers.
function projectFiles() {
  const globRe = (g) => new RegExp(`^${g.replace(/\/$/, '').replace(/[.+^$()|[\]\\]/g, '\\$&').replace(/\*\*\//g, '(.*/)?').replace(/\*\*/g, '.*').replace(/\*/g, '[^/]*').replace(/\?/g, '[^/]')}(/|$)`);
  let include = null;
  if (lang === 'typescript' && existsSync(join(dir, 'tsconfig.json'))) {
    const j = JSON.parse(readFileSync(join(dir, 'tsconfig.json'), 'utf8').replace(/^\s*\/\/.*$/gm, '').replace(/,(\s*[}\]])/g, '$1'));
    include = j.include ?? j.files ?? null;
  }
  if (lang === 'python') {
    if (existsSync(join(dir, 'pyrightconfig.json'))) include = JSON.parse(readFileSync(join(dir, 'pyrightconfig.json'), 'utf8')).include ?? null;
    else if (existsSync(join(dir, 'pyproject.toml'))) {
      const sec = /^\[tool\.pyright\]\s*$([\s\S]*?)(?=^\[|(?![\s\S]))/m.exec(readFileSync(join(dir, 'pyproject.toml'), 'utf8'));
      const inc = sec && /^include\s*=\s*\[([^\]]*)\]/m.exec(sec[1]);
      if (inc) include = [...inc[1].matchAll(/["']([^"']+)["']/g)].map((m) => m[1]);
    }
  }
  return include ? files.filter((f) => include.some((g) => globRe(g).test(f))) : files;
}
const inProject = new Set(projectFiles());

const cp = (s) => Array.from(s).length;
const esc = (n) => n.replace(/\$/g, '\\$');
const word = (n) => new RegExp(`(?<![\\w$])${esc(n)}(?![\\w$])`, 'g');
const MODS = '(?:(?:export|default|declare|public|private|protected|static|readonly|abstract|override|async|get|set)\\s+)*';
/** N2: ctags' line declares the name by text. */
function declares(def, l) {
  const n = esc(def.name);
  if (lang === 'typescript') {
    if (def.kind === 'method') return new RegExp(`^\\s*${MODS}\\*?${n}\\s*[<(]`).test(l);
    return new RegExp(`^\\s*${MODS}(function\\*?|class|interface|type|enum|namespace|const|let|var)\\s+${n}\\b`).test(l);
  }
  if (lang === 'python') return new RegExp(`^\\s*(async\\s+)?(def|class)\\s+${n}\\b`).test(l);
  if (def.kind === 'macro') return new RegExp(`^\\s*#\\s*define\\s+${n}\\b`).test(l);
  if (def.kind === 'function') return new RegExp(`\\b${n}\\s*\\(`).test(l);
  return word(def.name).test(l);
}
/** D1: the lines of a TS overload set (the consecutive declarations from ctags' line on), else ctags' line alone. */
function declarationLines(def) {
  const { lines } = text.get(def.path);
  if (lang !== 'typescript' || !/^(function|method)$/.test(def.kind)) return [def.line];
  const n = esc(def.name);
  const re = def.kind === 'function' ? new RegExp(`^\\s*${MODS}function\\*?\\s+${n}\\s*[<(]`) : new RegExp(`^\\s*${MODS}\\*?${n}\\s*[<(]`);
  const out = [def.line];
  // A signature ends with `;` (possibly lines later); the implementation follows it.
  let k = def.line - 1;
  while (k < lines.length) {
    let e = k;
    while (e < lines.length - 1 && !/[;{]\s*$/.test(lines[e])) e++;
    if (!/;\s*$/.test(lines[e])) break;
    let next = e + 1;
    while (next < lines.length && /^\s*(\/\/.*|\/?\*.*)?$/.test(lines[next])) next++;
    if (next >= lines.length || !re.test(lines[next])) break;
    out.push(next + 1);
    k = next;
  }
  return out;
}
/** N3: an occurrence (in code) that is also something else; prev is the line before it, after the rest. */
function other(prev, after, l, isDefLine) {
  if (/(?<!\.\.)\.\s*$/.test(prev) && !/(?<![\w$.])(self|this|cls)\.$/.test(prev)) return 'attribute';
  if (isDefLine) return null;
  // `NAME:` where a key, a property, a parameter or an annotated variable is declared (not `? NAME :`,
  // `case NAME:`, a return annotation `-> NAME:` or a dict key `{NAME: ...}`, which are uses).
  const declPlace = lang === 'python' ? /(^\s*|[(,]\s*|\*{1,2})$/ : /(^|[{(,;]|\b(readonly|public|private|protected|static|declare|abstract|override|accessor))\s*$/;
  if (/^\s*\??\s*:(?!:)/.test(after) && declPlace.test(prev) && !/->/.test(prev)) return 'key or annotation';
  if (/^\s*=(?![=>])/.test(after)) return 'assignment';
  if (lang === 'typescript') {
    if (/\b(const|let|var)\s+$/.test(prev) || /^\s*=>/.test(after)) return 'binding';
    if (/\b(const|let|var)\s*[{[][^}\]]*$/.test(prev) && /^[^{[]*[}\]]\s*=/.test(after)) return 'destructuring';
    if (/(^|[\s,{(])(get|set|async|static)\s+\*?$/.test(prev) && /^\s*[<(]/.test(after)) return 'method';
    if (/^\s*(\*\s*)?$/.test(prev.replace(new RegExp(MODS.slice(0, -1) + '$'), '')) && /^\s*[<(]/.test(after)) {
      // `NAME(...) {` or `NAME(...):` on one line: a method written in an object or a class.
      let d = 0;
      let j = after.indexOf('(');
      for (; j < after.length; j++) { if (after[j] === '(') d++; else if (after[j] === ')' && --d === 0) break; }
      if (j < after.length && /^\)\s*(\{|:)/.test(after.slice(j))) return 'method';
    }
  }
  if (lang === 'python') {
    if (/\b(for|as|lambda|global|nonlocal)\s+$/.test(prev) || /\b(for)\s+[\w\s,]*$/.test(prev) && /^[\w\s,]*\bin\b/.test(after)) return 'binding';
    if (/^\s*(async\s+)?def\s+\w+\s*\(/.test(l) && /\(([^)]*,)?\s*\*{0,2}$/.test(prev)) return 'parameter';
  }
  return null;
}

const positions = [];
const references = [];
const why = new Map();
// --why: every left-out name with its rule, on stderr.
const WHY = process.argv.includes('--why');
let current = null;
const exclude = (reason) => {
  why.set(reason, (why.get(reason) ?? 0) + 1);
  if (WHY) console.error(`${current.path}:${current.line} ${current.name} (${current.kind}): ${reason}`);
};
const candidates = [...byName.entries()].filter(([n, ts]) => ts.length === 1 && KINDS.test(ts[0].kind) && !OWNED.has(n) && n.length >= 4 && /^[A-Za-z_$][\w$]*$/.test(n)).sort(([, a], [, b]) => (a[0].path + a[0].line).localeCompare(b[0].path + b[0].line));
let labelledNames = 0;
for (const [name, [def]] of candidates) {
  current = def;
  const defText = text.get(def.path).lines[def.line - 1];
  if (!declares(def, defText)) { exclude('N2 ctags line declares no such name'); continue; }
  if (outsideImports.has(name)) { exclude('N4 imported from outside'); continue; }
  if (lang === 'c' && !defActive(def)) { exclude('N5 definition not active'); continue; }
  const declLines = declarationLines(def);
  const occ = [];
  let otherUse = null;
  for (const f of files) {
    const t = text.get(f);
    for (const m of t.s.matchAll(word(name))) {
      const k = lineOf(t, m.index);
      const l = t.lines[k];
      const col = m.index - t.starts[k];
      const prev = l.slice(0, col);
      const after = l.slice(col + name.length);
      const isCode = t.mask[m.index] === 1;
      const onDecl = f === def.path && declLines.includes(k + 1);
      occ.push({ path: f, line: k + 1, column: cp(prev) + 1, isCode, prev, after, l, onDecl });
      if (isCode && lang !== 'c' && !otherUse) otherUse = other(prev, after, l, onDecl);
    }
  }
  if (otherUse) { exclude(`N3 also ${otherUse}`); continue; }
  labelledNames++;
  const expected = { path: def.path, line: def.line, ...(declLines.length > 1 ? { lines: declLines } : {}) };
  const uses = occ.filter((o) => o.isCode && (lang !== 'c' || o.path === def.path) && !o.onDecl && analysed(o.path, o.line)
    && /^\s*\(/.test(o.after) && !(/(?<!\.\.)\.\s*$/.test(o.prev) && !/(?<![\w$.])(self|this|cls)\.$/.test(o.prev))
    && (lang !== 'c' || /^\s*$|[(=,]|return/.test(o.prev))
    && !/^\s*(import|from|export \{|#\s*include)\b/.test(o.l));
  positions.push(...uses.slice(0, 2).map((o) => ({ path: o.path, line: o.line, column: o.column, symbol: name, expected })));
  // References.
  const codeOcc = occ.filter((o) => o.isCode);
  const codeLines = [...new Set(codeOcc.map((o) => `${o.path}:${o.line}`))];
  const textLines = [...new Set(occ.map((o) => `${o.path}:${o.line}`))];
  // A TS constant whose value is an arrow function or a function expression is a function here.
  const tsFunctionConst = lang === 'typescript' && def.kind === 'constant' && new RegExp(`\\b(const|let|var)\\s+${esc(name)}\\s*(:[^=]*)?=\\s*(async\\s+)?(function\\b|<[^>]*>\\s*\\(|\\([^)]*\\)\\s*(:[^=]*)?=>|\\(\\s*$|[\\w$]+\\s*=>)`).test(defText);
  const refKind = lang === 'c' ? def.kind === 'function' && def.path.endsWith('.c') && /^\s*static\b/.test(defText) : /^(function|class)$/.test(def.kind) || tsFunctionConst;
  const covered = lang === 'c' ? codeOcc.every((o) => o.path === def.path) : codeOcc.every((o) => inProject.has(o.path));
  if (refKind && covered && codeOcc.every((o) => analysed(o.path, o.line)) && name.length >= 6 && codeLines.length >= 4 && codeLines.length <= 60) {
    references.push({ path: def.path, line: def.line, column: cp(defText.slice(0, defText.search(word(name)))) + 1, symbol: name, lines: codeLines.map((s) => ({ path: s.slice(0, s.lastIndexOf(':')), line: Number(s.slice(s.lastIndexOf(':') + 1)) })), textOnlyLines: textLines.length - codeLines.length });
  }
}
// Spread: every name's first use, then second uses, up to 150.
const firsts = positions.filter((p, i) => i === 0 || positions[i - 1].symbol !== p.symbol);
const seconds = positions.filter((p) => !firsts.includes(p));
const chosen = [...firsts, ...seconds].slice(0, 150).sort((a, b) => a.path.localeCompare(b.path) || a.line - b.line || a.column - b.column);
const out = { repository: `https://github.com/${repo}`, commit, language: lang, how: 'scripts/code-intel-label.mjs (rules N1-N5, P1-P3, D1, R1-R2 in its header)', positions: chosen, references: references.sort((a, b) => b.textOnlyLines - a.textOnlyLines || b.lines.length - a.lines.length || a.symbol.localeCompare(b.symbol)).slice(0, 8) };
writeFileSync(new URL(`../bench/data/code-intel-${lang}.json`, import.meta.url), JSON.stringify(out, null, 1) + '\n');
console.log(`${lang}: ${chosen.length} positions over ${new Set(chosen.map((p) => p.symbol)).size} names (${labelledNames} labelled names of ${candidates.length} unique; left out: ${[...why].map(([k, v]) => `${k} ${v}`).join(', ')}), ${out.references.length} reference sets of ${references.length}, commit ${commit}`);
