/**
 * Search methods of the daemon: search.grep and search.references (ripgrep) and search.symbols (an
 * in-memory index of definitions built with Universal Ctags and kept fresh incrementally).
 *
 * Confinement (see ../files/confinement.ts and docs/files.md):
 *  - the search root is resolved like any file path, opened, and ripgrep runs with its working
 *    directory set to `/proc/<daemon pid>/fd/<fd>`, i.e. exactly the directory that was checked;
 *    ripgrep never follows symlinks while walking;
 *  - ripgrep opens files by path, so a file swapped for a symlink between its walk and its open
 *    could be read. Nothing read that way is returned: every reported line is checked against the
 *    file itself (opened component by component with O_NOFOLLOW from the search root) at the
 *    offset ripgrep gave, and dropped when the bytes differ;
 *  - ctags never opens a workspace file: the daemon opens each file safely and feeds its bytes to
 *    `ctags --_interactive=sandbox` (a seccomp sandbox in which ctags cannot open files at all),
 *    with `--options=NONE` so no option file from the repository or a home directory is read.
 *
 * Searches run in child processes, so a long one never blocks other methods; results stop at
 * maxResults (ripgrep is killed at once), and a cancelled request kills its ripgrep.
 *
 * Modules: grep.ts (ripgrep runs and their verification), symbols.ts (the index), ctags.ts (the
 * ctags workers), common.ts (limits, parameters, search roots). Imports node built-ins and sibling
 * daemon files only.
 */
import { Confinement, FILE_LIMITS, fileMethods } from '../files/index.js';
import type { CallContext, Handlers } from '../server.js';
import type { SymbolsProgress } from '../protocol.js';
import type { FileMethod } from '../files/index.js';
import { SEARCH_LIMITS, obj, text, maxResultsOf } from './common.js';
import { grep } from './grep.js';
import { SymbolIndex } from './symbols.js';

// ---------------------------------------------------------------------------------------------
// Methods
// ---------------------------------------------------------------------------------------------

export type SearchMethod = 'search.grep' | 'search.references' | 'search.symbols';

export function searchMethods(c: Confinement): { methods: Handlers<SearchMethod>; notify: (rels: string[]) => void } {
  const index = new SymbolIndex(c);
  const timeoutOf = (v: unknown): number =>
    typeof v === 'number' && Number.isInteger(v) && v >= 100 && v <= 600_000 ? v : SEARCH_LIMITS.defaultTimeoutMs;
  const methods: Handlers<SearchMethod> = {
    'search.grep': (params: unknown, ctx: CallContext) => {
      const p = obj(params);
      const glob = p.glob === undefined ? undefined : text(p.glob, 'glob', 0, SEARCH_LIMITS.globChars);
      return grep(
        c,
        {
          pattern: text(p.pattern, 'pattern', 1, SEARCH_LIMITS.patternChars),
          path: p.path ?? '.',
          glob: glob || undefined,
          maxResults: maxResultsOf(p.maxResults),
          fixed: false,
          word: false,
          timeoutMs: timeoutOf(p.timeoutMs),
        },
        ctx.signal,
      );
    },
    'search.references': async (params: unknown, ctx: CallContext) => {
      const p = obj(params);
      const glob = p.glob === undefined ? undefined : text(p.glob, 'glob', 0, SEARCH_LIMITS.globChars);
      const symbol = text(p.symbol, 'symbol', 1, 256);
      const r = await grep(c, { pattern: symbol, path: p.path ?? '.', glob: glob || undefined, maxResults: maxResultsOf(p.maxResults), fixed: true, word: true, timeoutMs: timeoutOf(p.timeoutMs) }, ctx.signal);
      return { symbol, ...r };
    },
    'search.symbols': async (params: unknown, ctx: CallContext) => {
      const p = obj(params);
      const language = p.language === undefined ? undefined : text(p.language, 'language', 1, 40);
      // While the index is being built, report how far it got (once a second) as `progress` events.
      const ticker = setInterval(() => {
        if (index.building && index.building.total >= 200) ctx.emit('progress', { ...index.building } satisfies SymbolsProgress);
      }, 1000);
      try {
        return await index.search({ query: text(p.query, 'query', 1, 256), path: p.path ?? '.', language, maxResults: maxResultsOf(p.maxResults) });
      } finally {
        clearInterval(ticker);
      }
    },
  };
  return { methods, notify: (rels) => index.notify(rels) };
}

/** Every file and search method of the daemon, sharing one confinement; writes keep the symbol index fresh (and reach `onChange`: the language servers, lsp/). */
export function workspaceFileMethods(root: string, onChange?: (rels: string[]) => void): Handlers<FileMethod | SearchMethod> {
  let notify: (rels: string[]) => void = () => undefined;
  const files = fileMethods({
    root,
    onChange: (rels) => {
      notify(rels);
      onChange?.(rels);
    },
  });
  const search = searchMethods(files.confinement);
  notify = search.notify;
  return { ...files.methods, ...search.methods };
}

export { FILE_LIMITS };
