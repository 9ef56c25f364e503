/** search.symbols: an in-memory index of definitions (ctags), kept fresh by inotify and the file methods. */
import { closeSync, fstatSync, lstatSync, openSync, readdirSync, watch, type FSWatcher, type Stats } from 'node:fs';
import { availableParallelism } from 'node:os';
import { Confinement, fdPath, joinRel, parentRel } from '../files/index.js';
import { DaemonError, type SymbolHit, type SymbolsReply } from '../protocol.js';
import { readAsync, SEARCH_LIMITS, O_DIR_NOFOLLOW, O_READ, IGNORE_FILES, TMP_PREFIX, CTAGS } from './common.js';
import { rgFiles } from './grep.js';
import { ctagsNameFilter, CtagsPool, type Tag } from './ctags.js';


// ---------------------------------------------------------------------------------------------
// Symbol index
// ---------------------------------------------------------------------------------------------

/** One indexed file: its identity for change detection and its tags, stored compactly. */
interface IndexedFile {
  ino: number;
  size: number;
  mtimeMs: number;
  language: string;
  /** Lower-cased names joined by "\n": a quick test before the rows are split. */
  names: string;
  /** One row per tag: name \t kind \t line \t scope \t scopeKind \t signature, joined by "\n". */
  rows: string;
  count: number;
}

const clean = (s: string | undefined): string => (s ?? '').replace(/[\t\n\r]/g, ' ');

const LANGUAGE_ALIASES: Record<string, string> = {
  ts: 'typescript', tsx: 'typescript', js: 'javascript', jsx: 'javascript', mjs: 'javascript', py: 'python', python3: 'python',
  rb: 'ruby', rs: 'rust', golang: 'go', cpp: 'c++', cxx: 'c++', cc: 'c++', hpp: 'c++', cs: 'c#', csharp: 'c#',
  sh: 'sh', bash: 'sh', shell: 'sh', zsh: 'sh', kt: 'kotlin', pl: 'perl', objc: 'objectivec', 'objective-c': 'objectivec',
  yml: 'yaml', ps1: 'powershell', ex: 'elixir', exs: 'elixir', hs: 'haskell', ml: 'ocaml', vb: 'basic',
};

export type { SymbolHit } from '../protocol.js';

export class SymbolIndex {
  private readonly files = new Map<string, IndexedFile>();
  private readonly watchers = new Map<string, { w: FSWatcher; subdirs: Set<string> }>();
  private readonly dirtyFiles = new Set<string>();
  private readonly dirtyDirs = new Set<string>();
  private built = false;
  private needFull = false;
  private mode: 'watch' | 'scan' = 'watch';
  private lastFull = 0;
  private queue: Promise<unknown> = Promise.resolve();
  private readonly pool = new CtagsPool(Math.max(1, Math.min(4, availableParallelism())));
  private symbols = 0;
  private lastStats = { reindexed: 0, removed: 0, full: false, ms: 0 };
  private netScheduled = false;
  /** True when a limit (files listed, files indexed, symbols) left part of the workspace out. */
  private partial = false;
  /** Files parsed so far of the ones being indexed, while a (re)index runs. */
  building: { done: number; total: number } | null = null;

  constructor(private readonly c: Confinement) {}

  /** Told by the file methods which paths they changed (before any inotify event arrives). */
  notify(rels: string[]): void {
    if (!this.built) return;
    for (const rel of rels) {
      if (this.files.has(rel)) this.dirtyFiles.add(rel);
      if (IGNORE_FILES.has(rel.slice(rel.lastIndexOf('/') + 1))) this.needFull = true;
      // The nearest watched directory: a new (or moved, or deleted) entry shows up in its listing.
      this.dirtyDirs.add(this.watchedAncestor(parentRel(rel)));
    }
  }

  /** The directory itself when watched, else its nearest watched ancestor (the root at worst). */
  private watchedAncestor(dir: string): string {
    let d = dir;
    while (d !== '.' && !this.watchers.has(d)) d = parentRel(d);
    return d;
  }

  /** Brings the index up to date (one refresh at a time; later callers queue behind). */
  refresh(): Promise<void> {
    const run = this.queue.then(() => this.refreshNow());
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async refreshNow(): Promise<void> {
    const started = Date.now();
    this.lastStats = { reindexed: 0, removed: 0, full: false, ms: 0 };
    const full = !this.built || this.needFull || this.mode === 'scan' || this.dirtyDirs.size > SEARCH_LIMITS.maxDirtyDirs;
    if (full) await this.fullScan();
    else if (this.dirtyDirs.size > 0 || this.dirtyFiles.size > 0) await this.incremental();
    this.lastStats.full = full;
    this.lastStats.ms = Date.now() - started;
    if (!full && started - this.lastFull > SEARCH_LIMITS.fullRescanMs && !this.netScheduled) {
      // The net under lost inotify events: a full (stat) rescan after this answer, not before it.
      this.netScheduled = true;
      const net = this.queue.then(() => this.fullScan()).finally(() => {
        this.netScheduled = false;
        this.pool.trim();
      });
      this.queue = net.catch(() => undefined);
    }
    this.pool.trim();
  }

  private async fullScan(): Promise<void> {
    this.needFull = false;
    this.dirtyDirs.clear();
    this.dirtyFiles.clear();
    const seen = new Set<string>();
    const changed: Array<{ rel: string; st: Stats }> = [];
    const filter = ctagsNameFilter();
    const dirs = new Set<string>(['.']);
    let over = false;
    const listing = await rgFiles(this.c, '.', undefined, (rel) => {
      for (let d = parentRel(rel); d !== '.' && !dirs.has(d); d = parentRel(d)) dirs.add(d);
      if (filter && !filter.test(rel.slice(rel.lastIndexOf('/') + 1))) return;
      if (seen.size >= SEARCH_LIMITS.maxIndexedFiles) {
        over = true;
        return;
      }
      seen.add(rel);
      const st = this.stat(rel);
      if (st && this.differs(rel, st)) changed.push({ rel, st });
    });
    this.partial = listing.truncated || over;
    for (const rel of [...this.files.keys()]) if (!seen.has(rel)) this.drop(rel);
    await this.index(changed);
    this.syncWatches(dirs);
    this.built = true;
    this.lastFull = Date.now();
  }

  private async incremental(): Promise<void> {
    const dirtyDirs = [...new Set([...this.dirtyDirs].map((d) => this.watchedAncestor(d)))];
    const dirtyFiles = new Set(this.dirtyFiles);
    this.dirtyDirs.clear();
    this.dirtyFiles.clear();
    const filter = ctagsNameFilter();
    const changed: Array<{ rel: string; st: Stats }> = [];
    const newDirs = new Set<string>();
    for (const dir of dirtyDirs) {
      const present = this.subdirsOf(dir);
      if (present === null) {
        // Gone (or no longer a plain directory): everything under it leaves the index.
        this.dropUnder(dir);
        continue;
      }
      const known = this.watchers.get(dir)?.subdirs ?? new Set<string>();
      const added = [...present].filter((s) => !known.has(s));
      for (const s of known) if (!present.has(s)) this.dropUnder(joinRel(dir, s));
      const deep = added.length > 0 || !this.watchers.has(dir);
      const listedSet = new Set<string>();
      try {
        await rgFiles(this.c, dir, deep ? undefined : 1, (rel) => {
          for (let d = parentRel(rel); d !== '.' && d !== dir && !this.watchers.has(d); d = parentRel(d)) newDirs.add(d);
          if (filter && !filter.test(rel.slice(rel.lastIndexOf('/') + 1))) return;
          listedSet.add(rel);
          if (this.files.has(rel) || this.files.size < SEARCH_LIMITS.maxIndexedFiles) dirtyFiles.add(rel);
          else this.partial = true;
        });
      } catch {
        this.dropUnder(dir);
        continue;
      }
      // Indexed files in the listed scope that ripgrep no longer lists (deleted, or now ignored).
      const prefix = dir === '.' ? '' : dir + '/';
      for (const rel of [...this.files.keys()]) {
        if (!rel.startsWith(prefix) || listedSet.has(rel)) continue;
        if (!deep && rel.slice(prefix.length).includes('/')) continue;
        this.drop(rel);
      }
      const w = this.watchers.get(dir);
      if (w) w.subdirs = present;
    }
    for (const rel of dirtyFiles) {
      const st = this.stat(rel);
      if (!st) {
        if (this.files.has(rel)) this.drop(rel);
        continue;
      }
      if (this.differs(rel, st)) changed.push({ rel, st });
    }
    await this.index(changed);
    if (newDirs.size > 0) {
      const all = new Set(this.watchers.keys());
      for (const d of newDirs) all.add(d);
      this.syncWatches(all);
    }
  }

  private stat(rel: string): Stats | undefined {
    try {
      const st = lstatSync(`${this.c.root}/${rel}`);
      return st.isFile() ? st : undefined;
    } catch {
      return undefined;
    }
  }

  private differs(rel: string, st: Stats): boolean {
    const f = this.files.get(rel);
    return !f || f.ino !== st.ino || f.size !== st.size || f.mtimeMs !== st.mtimeMs;
  }

  private drop(rel: string): void {
    const f = this.files.get(rel);
    if (!f) return;
    this.symbols -= f.count;
    this.files.delete(rel);
    this.lastStats.removed++;
  }

  private dropUnder(dir: string): void {
    const prefix = dir === '.' ? '' : dir + '/';
    for (const rel of [...this.files.keys()]) if (rel.startsWith(prefix)) this.drop(rel);
    for (const [d, w] of [...this.watchers]) {
      if (d !== '.' && (d === dir || d.startsWith(prefix))) {
        w.w.close();
        this.watchers.delete(d);
      }
    }
  }

  /** Names of the plain subdirectories of a directory (null when it is gone or not a directory). */
  private subdirsOf(dir: string): Set<string> | null {
    let d: { fd: number };
    try {
      d = this.c.openDir(dir === '.' ? [] : dir.split('/'), dir);
    } catch {
      return null;
    }
    try {
      const out = new Set<string>();
      for (const e of readdirSync(fdPath(d.fd), { withFileTypes: true })) if (e.isDirectory() && e.name !== '.git') out.add(e.name);
      return out;
    } catch {
      return null;
    } finally {
      closeSync(d.fd);
    }
  }

  /** Reads each file safely and runs it through ctags; files that fail keep no tags. */
  private async index(changed: Array<{ rel: string; st: Stats }>): Promise<void> {
    if (changed.length === 0) return;
    if (!CTAGS) throw new DaemonError('FAILED_PRECONDITION', 'Universal Ctags is not installed in the sandbox image; symbols_search is unavailable');
    const dirs = new DirCache(this.c);
    let next = 0;
    this.building = { done: 0, total: changed.length };
    const lanes = Math.max(1, Math.min(16, changed.length));
    const lane = async (): Promise<void> => {
      while (next < changed.length) {
        const { rel, st } = changed[next++]!;
        const data = await dirs.readFile(rel, SEARCH_LIMITS.symbolFileBytes);
        let tags: Tag[] | null = null;
        if (data && data.indexOf(0) === -1) tags = await this.pool.run(rel, data);
        this.store(rel, st, tags ?? []);
        if (this.building) this.building.done++;
      }
    };
    try {
      await Promise.all(Array.from({ length: lanes }, lane));
    } finally {
      dirs.close();
      this.building = null;
    }
  }

  private store(rel: string, st: Stats, tags: Tag[]): void {
    const old = this.files.get(rel);
    if (old) this.symbols -= old.count;
    if (this.symbols + tags.length > SEARCH_LIMITS.maxSymbols) {
      // Full: the file is tracked without its tags, and the index says it is partial.
      this.partial = true;
      tags = [];
    }
    const names: string[] = [];
    const rows: string[] = [];
    for (const t of tags) {
      const name = clean(t.name);
      names.push(name.toLowerCase());
      rows.push(`${name}\t${clean(t.kind)}\t${t.line}\t${clean(t.scope)}\t${clean(t.scopeKind)}\t${clean(t.signature)}`);
    }
    this.files.set(rel, {
      ino: st.ino,
      size: st.size,
      mtimeMs: st.mtimeMs,
      language: tags[0]?.language ?? '',
      names: names.join('\n'),
      rows: rows.join('\n'),
      count: tags.length,
    });
    this.symbols += tags.length;
    this.lastStats.reindexed++;
  }

  /** Watches exactly `dirs` (each opened safely first); falls back to rescanning on every query. */
  private syncWatches(dirs: Set<string>): void {
    if (this.mode === 'scan') return;
    for (const [d, w] of [...this.watchers]) {
      if (!dirs.has(d)) {
        w.w.close();
        this.watchers.delete(d);
      }
    }
    if (dirs.size > SEARCH_LIMITS.maxWatches) return this.toScanMode();
    for (const d of dirs) {
      if (this.watchers.has(d)) continue;
      let fd: number;
      try {
        fd = this.c.openDir(d === '.' ? [] : d.split('/'), d).fd;
      } catch {
        continue;
      }
      try {
        const subdirs = new Set<string>();
        for (const e of readdirSync(fdPath(fd), { withFileTypes: true })) if (e.isDirectory() && e.name !== '.git') subdirs.add(e.name);
        const w = watch(fdPath(fd), { persistent: false }, (event, filename) => this.onEvent(d, event, filename));
        w.on('error', () => {
          this.needFull = true;
          w.close();
          this.watchers.delete(d);
        });
        this.watchers.set(d, { w, subdirs });
      } catch {
        // ENOSPC (inotify watches exhausted) or similar: stop watching, rescan per query instead.
        return this.toScanMode();
      } finally {
        closeSync(fd);
      }
    }
  }

  private toScanMode(): void {
    this.mode = 'scan';
    for (const w of this.watchers.values()) w.w.close();
    this.watchers.clear();
  }

  private onEvent(dir: string, event: string, filename: string | Buffer | null): void {
    if (filename === null) {
      this.needFull = true;
      return;
    }
    const name = filename.toString();
    if (name.startsWith(TMP_PREFIX)) return;
    if (IGNORE_FILES.has(name)) this.needFull = true;
    const rel = joinRel(dir, name);
    if (event === 'change' && this.files.has(rel)) this.dirtyFiles.add(rel);
    else this.dirtyDirs.add(dir);
  }

  async search(q: { query: string; path: unknown; language?: string; maxResults: number }): Promise<SymbolsReply> {
    const scope = this.scopeOf(q.path);
    await this.refresh();
    const needle = q.query.toLowerCase();
    const lang = q.language ? (LANGUAGE_ALIASES[q.language.toLowerCase()] ?? q.language.toLowerCase()) : undefined;
    // Candidates stay small (a file, a row number, a rank) until the best maxResults are chosen.
    const CAP = 50_000;
    const cands: Array<{ rank: number; len: number; rel: string; f: IndexedFile; row: number }> = [];
    let total = 0;
    for (const [rel, f] of this.files) {
      if (f.count === 0) continue;
      let at = f.names.indexOf(needle);
      if (at < 0) continue;
      if (scope.file !== undefined ? rel !== scope.file : scope.prefix !== '' && !rel.startsWith(scope.prefix)) continue;
      if (lang && f.language.toLowerCase() !== lang) continue;
      // Walk the matches in the joined names, tracking which row (name) each one falls in.
      let row = 0;
      let rowStart = 0;
      let lastRow = -1;
      while (at >= 0) {
        for (let nl = f.names.indexOf('\n', rowStart); nl !== -1 && nl < at; nl = f.names.indexOf('\n', rowStart)) {
          row++;
          rowStart = nl + 1;
        }
        let rowEnd = f.names.indexOf('\n', rowStart);
        if (rowEnd < 0) rowEnd = f.names.length;
        if (at + needle.length <= rowEnd && row !== lastRow) {
          lastRow = row;
          total++;
          if (cands.length < CAP) {
            const len = rowEnd - rowStart;
            cands.push({ rank: len === needle.length ? 0 : at === rowStart ? 1 : 2, len, rel, f, row });
          }
        }
        at = f.names.indexOf(needle, at + 1);
      }
    }
    cands.sort((a, b) => a.rank - b.rank || a.len - b.len || (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0) || a.row - b.row);
    const rowsOf = new Map<IndexedFile, string[]>();
    const symbols = cands.slice(0, q.maxResults).map((cand) => {
      let rows = rowsOf.get(cand.f);
      if (!rows) {
        rows = cand.f.rows.split('\n');
        rowsOf.set(cand.f, rows);
      }
      const [name, kind, line, scopeName, scopeKind, signature] = rows[cand.row]!.split('\t');
      const hit: SymbolHit = { name: name!, kind: kind!, language: cand.f.language, file: cand.rel, line: Number(line) };
      if (scopeName) hit.scope = scopeName;
      if (scopeKind) hit.scopeKind = scopeKind;
      if (signature) hit.signature = signature;
      return hit;
    });
    return {
      symbols,
      count: symbols.length,
      total,
      truncated: total > symbols.length,
      index: {
        files: this.files.size,
        symbols: this.symbols,
        partial: this.partial,
        freshness: this.mode === 'watch' ? 'inotify' : 'rescan-per-query',
        watchedDirectories: this.watchers.size,
        refresh: this.lastStats,
      },
    };
  }

  /** The part of the index a path selects: a directory prefix or one file (checked like any path). */
  private scopeOf(p: unknown): { prefix: string; file?: string } {
    const e = this.c.resolve(p ?? '.', { follow: true });
    try {
      if (!e.st) throw new DaemonError('NOT_FOUND', `path: ${String(p)} does not exist`, { field: 'path', path: String(p) });
      if (e.name === '' || e.rel === '.') return { prefix: '' };
      if (e.st.isDirectory()) return { prefix: e.rel + '/' };
      return { prefix: '', file: e.rel };
    } finally {
      closeSync(e.dir);
    }
  }
}

/** Opens files component by component (O_NOFOLLOW) from the root, keeping a few directories open. */
export class DirCache {
  private readonly dirs = new Map<string, number>();
  private readonly rootFd: number;

  constructor(c: Confinement) {
    this.rootFd = c.openRoot();
  }

  private dir(rel: string): number | undefined {
    if (rel === '.' || rel === '') return this.rootFd;
    const have = this.dirs.get(rel);
    if (have !== undefined) {
      this.dirs.delete(rel);
      this.dirs.set(rel, have);
      return have;
    }
    const parent = this.dir(parentRel(rel));
    if (parent === undefined) return undefined;
    let fd: number;
    try {
      fd = openSync(fdPath(parent, rel.slice(rel.lastIndexOf('/') + 1)), O_DIR_NOFOLLOW);
    } catch {
      return undefined;
    }
    this.dirs.set(rel, fd);
    if (this.dirs.size > 64) {
      const [oldRel, oldFd] = this.dirs.entries().next().value as [string, number];
      // Never close a directory that is an ancestor of the one just opened (it may be in use).
      if (!rel.startsWith(oldRel + '/')) {
        this.dirs.delete(oldRel);
        closeSync(oldFd);
      }
    }
    return fd;
  }

  /** The file's bytes when it is a regular file of at most `max` bytes, else null. */
  async readFile(rel: string, max: number): Promise<Buffer | null> {
    const dir = this.dir(parentRel(rel));
    if (dir === undefined) return null;
    let fd: number;
    try {
      fd = openSync(fdPath(dir, rel.slice(rel.lastIndexOf('/') + 1)), O_READ);
    } catch {
      return null;
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile() || st.size > max) return null;
      const buf = Buffer.allocUnsafe(st.size);
      let got = 0;
      while (got < st.size) {
        const { bytesRead } = await readAsync(fd, buf, got, st.size - got, got);
        if (bytesRead === 0) break;
        got += bytesRead;
      }
      return buf.subarray(0, got);
    } catch {
      return null;
    } finally {
      closeSync(fd);
    }
  }

  close(): void {
    for (const fd of this.dirs.values()) closeSync(fd);
    this.dirs.clear();
    closeSync(this.rootFd);
  }
}
