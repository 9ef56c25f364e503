/**
 * Search methods of the daemon: search.grep and search.references (ripgrep) and search.symbols (an
 * in-memory index of definitions built with Universal Ctags and kept fresh incrementally).
 *
 * Confinement (see files.ts and docs/files.md):
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
 * Imports node built-ins and sibling daemon files only.
 */
import { spawn, spawnSync, type ChildProcessByStdio } from 'node:child_process';
import { createHash } from 'node:crypto';
import type { Readable, Writable } from 'node:stream';
import { closeSync, constants as FS, existsSync, fstatSync, lstatSync, openSync, read, readdirSync, readSync, watch, type FSWatcher, type Stats } from 'node:fs';
import { availableParallelism } from 'node:os';
import { StringDecoder } from 'node:string_decoder';
import { promisify } from 'node:util';
import { Confinement, FILE_LIMITS, fdPath, fileMethods, joinRel, parentRel } from './files.js';
import { DaemonError } from './protocol.js';
import type { CallContext, MethodTable } from './server.js';

const readAsync = promisify(read);

export const SEARCH_LIMITS = {
  patternChars: 4096,
  globChars: 512,
  maxResults: 500,
  /** Characters of a matching line returned; longer lines are cut and marked. */
  lineChars: 1000,
  /** A search stops (partial result, timedOut) after this long. */
  defaultTimeoutMs: 120_000,
  /** Files larger than this are not given to ctags. */
  symbolFileBytes: 1024 * 1024,
  /** Tags kept per file. */
  tagsPerFile: 5000,
  /** Directories watched with inotify; beyond it the index rescans on every query. */
  maxWatches: 8192,
  /** Dirty directories handled one by one; more means a full rescan. */
  maxDirtyDirs: 64,
  /** A full (stat) rescan at least this often, as a net under lost events. */
  fullRescanMs: 60_000,
  /** One ctags request longer than this kills that ctags (the file is skipped). */
  ctagsFileTimeoutMs: 20_000,
  /** Files listed for the index at most (ripgrep is stopped beyond; the index is then partial). */
  maxListedFiles: 400_000,
  /** Files indexed and symbols kept at most: the daemon's heap is small (see docs/files.md). */
  maxIndexedFiles: 100_000,
  maxSymbols: 600_000,
} as const;

const O_DIR_NOFOLLOW = FS.O_RDONLY | FS.O_DIRECTORY | FS.O_NOFOLLOW;
const O_READ = FS.O_RDONLY | FS.O_NOFOLLOW | FS.O_NONBLOCK;
const IGNORE_FILES = new Set(['.gitignore', '.ignore', '.rgignore']);
const TMP_PREFIX = '.atelier-tmp-';

const invalid = (message: string, details: Record<string, unknown> = {}) => new DaemonError('INVALID_ARGUMENT', message, details);

function findBinary(candidates: string[]): string | undefined {
  return candidates.find((p) => existsSync(p));
}

const RG = findBinary(['/usr/bin/rg', '/usr/local/bin/rg', '/bin/rg']);
const CTAGS = findBinary(['/usr/bin/ctags-universal', '/usr/bin/universal-ctags', '/usr/bin/ctags', '/usr/local/bin/ctags']);

function childEnv(): Record<string, string> {
  return { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8' };
}

// ---------------------------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------------------------

function obj(v: unknown): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid('params must be an object');
  return v as Record<string, unknown>;
}

function text(v: unknown, name: string, min: number, max: number): string {
  if (typeof v !== 'string' || v.length < min || v.length > max) throw invalid(`${name} must be a string of ${min}-${max} characters`, { field: name });
  if (v.includes('\0')) throw invalid(`${name} must not contain NUL`, { field: name });
  return v;
}

function maxResultsOf(v: unknown): number {
  if (v === undefined) return 100;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > SEARCH_LIMITS.maxResults) throw invalid(`maxResults must be an integer from 1 to ${SEARCH_LIMITS.maxResults}`, { field: 'maxResults' });
  return v;
}

// ---------------------------------------------------------------------------------------------
// Search roots
// ---------------------------------------------------------------------------------------------

interface SearchRoot {
  /** Open directory ripgrep runs in. */
  fd: number;
  /** Its real root-relative path. */
  rel: string;
  /** The argument given to ripgrep: './' or './<file name>'. */
  arg: string;
}

/** Resolves the path a search runs under: a directory, or one regular file (searched from its directory). */
function searchRoot(c: Confinement, p: unknown): SearchRoot {
  const shown = String(p ?? '.');
  const e = c.resolve(p ?? '.', { follow: true });
  if (!e.st) {
    closeSync(e.dir);
    throw new DaemonError('NOT_FOUND', `path: ${shown} does not exist`, { field: 'path', path: shown });
  }
  if (e.name === '') return { fd: e.dir, rel: '.', arg: './' };
  if (e.st.isDirectory()) {
    try {
      return { fd: openSync(fdPath(e.dir, e.name), O_DIR_NOFOLLOW), rel: e.rel, arg: './' };
    } catch {
      throw new DaemonError('PERMISSION_DENIED', `path: ${shown} changed while the search started`, { field: 'path', path: shown });
    } finally {
      closeSync(e.dir);
    }
  }
  if (e.st.isFile()) return { fd: e.dir, rel: parentRel(e.rel), arg: `./${e.name}` };
  closeSync(e.dir);
  throw new DaemonError('PERMISSION_DENIED', `path: ${shown} is not a regular file or directory`, { field: 'path', path: shown });
}

// ---------------------------------------------------------------------------------------------
// ripgrep
// ---------------------------------------------------------------------------------------------

export interface GrepMatch {
  file: string;
  line: number;
  /** 1-based byte column of the first match on the line (ripgrep's convention). */
  column: number;
  /** The line without its line ending; a long line is cut to a window around the match. */
  text: string;
  /** Present (true) when text is only part of the line (see SEARCH_LIMITS.lineChars). */
  textTruncated?: boolean;
  /** With textTruncated: the 1-based byte column of the line where text starts. */
  textColumn?: number;
}

/** What is kept of one match: bounded, whatever the length of the line. */
interface RawMatch {
  path: string;
  pathBytes?: Buffer;
  lineNumber: number;
  /** Byte offset of the line in the file. */
  offset: number;
  /** The whole line's length in bytes, line ending included. */
  lineLength: number;
  /** The whole line when it is at most LINE_KEEP_BYTES, else undefined (then digest is set). */
  line?: Buffer;
  /** SHA-256 of the whole line, for lines longer than LINE_KEEP_BYTES. */
  digest?: string;
  /** The part of the line shown and where it starts (byte offset in the line). */
  window: Buffer;
  windowStart: number;
  column: number;
}

/** Lines up to this many bytes are kept whole; longer ones as a window and a digest. */
const LINE_KEEP_BYTES = 4096;
/** ripgrep JSON lines (one per match) longer than this are skipped unread, and counted. */
const MAX_JSON_LINE_BYTES = 8 * 1024 * 1024;

type RgText = { text?: string; bytes?: string };

const bytesOf = (t: RgText): Buffer => (t.bytes !== undefined ? Buffer.from(t.bytes, 'base64') : Buffer.from(t.text ?? '', 'utf8'));
const MATCH_PREFIX = Buffer.from('{"type":"match"');

interface RgRun {
  matches: RawMatch[];
  truncated: boolean;
  timedOut: boolean;
  stderr: string;
  exitCode: number | null;
  sawOutput: boolean;
  /** Matching lines too long to take from ripgrep's output (see MAX_JSON_LINE_BYTES). */
  skippedLongLines: number;
}

/** Runs ripgrep --json in the search root, collecting up to `max` matching lines (one more means truncated). */
function runRg(root: SearchRoot, args: string[], max: number, signal: AbortSignal, timeoutMs: number): Promise<RgRun> {
  if (!RG) throw new DaemonError('FAILED_PRECONDITION', 'ripgrep (rg) is not installed in the sandbox image; search is unavailable');
  return new Promise<RgRun>((resolve, reject) => {
    let child: ChildProcessByStdio<null, Readable, Readable>;
    try {
      child = spawn(RG, [...args, '--', root.arg], { cwd: `/proc/self/fd/${root.fd}`, env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      reject(new DaemonError('INTERNAL', `cannot start ripgrep: ${(e as Error).message}`));
      return;
    }
    const run: RgRun = { matches: [], truncated: false, timedOut: false, stderr: '', exitCode: null, sawOutput: false, skippedLongLines: 0 };
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    let skipping = false;
    let stopped = false;
    const stop = (): void => {
      if (stopped) return;
      stopped = true;
      child.kill('SIGKILL');
    };
    const onAbort = (): void => stop();
    signal.addEventListener('abort', onAbort);
    const timer = setTimeout(() => {
      run.timedOut = true;
      stop();
    }, timeoutMs);

    const handleLine = (line: Buffer): void => {
      run.sawOutput = true;
      if (stopped || line.length < MATCH_PREFIX.length || line.compare(MATCH_PREFIX, 0, MATCH_PREFIX.length, 0, MATCH_PREFIX.length) !== 0) return;
      if (run.matches.length >= max) {
        run.truncated = true;
        stop();
        return;
      }
      const d = (JSON.parse(line.toString('utf8')) as { data: { path: RgText; lines: RgText; line_number: number; absolute_offset: number; submatches: Array<{ start: number }> } }).data;
      let path = d.path.text;
      let pathBytes: Buffer | undefined;
      if (path === undefined) {
        pathBytes = Buffer.from(d.path.bytes ?? '', 'base64');
        path = pathBytes.toString('utf8');
      }
      const full = bytesOf(d.lines);
      const start = d.submatches[0]?.start ?? 0;
      const m: RawMatch = { path, pathBytes, lineNumber: d.line_number, offset: d.absolute_offset, lineLength: full.length, column: start + 1, window: full, windowStart: 0 };
      if (full.length <= LINE_KEEP_BYTES) {
        m.line = full;
      } else {
        m.digest = createHash('sha256').update(full).digest('hex');
        m.windowStart = Math.max(0, start - 256);
        m.window = Buffer.from(full.subarray(m.windowStart, m.windowStart + LINE_KEEP_BYTES)); // a copy: the line is let go
      }
      run.matches.push(m);
    };

    child.stdout.on('data', (chunk: Buffer) => {
      let start = 0;
      for (let nl = chunk.indexOf(10); nl !== -1; nl = chunk.indexOf(10, start)) {
        const part = chunk.subarray(start, nl);
        start = nl + 1;
        if (skipping) {
          skipping = false;
          continue;
        }
        if (pending.length > 0) {
          pending.push(part);
          const line = Buffer.concat(pending);
          pending = [];
          pendingBytes = 0;
          handleLine(line);
        } else {
          handleLine(part);
        }
      }
      if (start < chunk.length && !skipping) {
        pending.push(chunk.subarray(start));
        pendingBytes += chunk.length - start;
        if (pendingBytes > MAX_JSON_LINE_BYTES) {
          // A gigantic line (a minified bundle, a data blob): not held in memory, only counted.
          if (pending[0]!.compare(MATCH_PREFIX, 0, MATCH_PREFIX.length, 0, Math.min(MATCH_PREFIX.length, pending[0]!.length)) === 0) run.skippedLongLines++;
          pending = [];
          pendingBytes = 0;
          skipping = true;
        }
      }
    });
    child.stderr.on('data', (d: Buffer) => {
      if (run.stderr.length < 8192) run.stderr += d.toString('utf8');
    });
    child.on('error', (e) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      reject(new DaemonError('INTERNAL', `ripgrep failed: ${e.message}`));
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      run.exitCode = code;
      if (signal.aborted) reject(new DaemonError('CANCELLED', 'search cancelled'));
      else resolve(run);
    });
  });
}

/**
 * Keeps only matches whose line is really at that offset in that file, read through descriptors
 * opened component by component with O_NOFOLLOW from the search root (see the module comment).
 */
function verifyMatches(rootFd: number, matches: RawMatch[]): RawMatch[] {
  const dirs = new Map<string, number>();
  const openDirRel = (rel: string): number | undefined => {
    if (rel === '') return rootFd;
    const have = dirs.get(rel);
    if (have !== undefined) return have;
    const cut = rel.lastIndexOf('/');
    const parent = openDirRel(cut < 0 ? '' : rel.slice(0, cut));
    if (parent === undefined) return undefined;
    try {
      const fd = openSync(fdPath(parent, cut < 0 ? rel : rel.slice(cut + 1)), O_DIR_NOFOLLOW);
      dirs.set(rel, fd);
      return fd;
    } catch {
      return undefined;
    }
  };
  const byFile = new Map<string, RawMatch[]>();
  for (const m of matches) {
    const list = byFile.get(m.path);
    if (list) list.push(m);
    else byFile.set(m.path, [m]);
  }
  const kept: RawMatch[] = [];
  const buf = Buffer.allocUnsafe(64 * 1024);
  try {
    for (const [path, list] of byFile) {
      const rel = path.startsWith('./') ? path.slice(2) : path;
      if (rel === '' || rel.split('/').some((s) => s === '..' || s === '')) continue;
      if (list[0]!.pathBytes) continue; // names that are not UTF-8 cannot be re-opened reliably: dropped
      const cut = rel.lastIndexOf('/');
      const dir = openDirRel(cut < 0 ? '' : rel.slice(0, cut));
      if (dir === undefined) continue;
      let fd: number;
      try {
        fd = openSync(fdPath(dir, cut < 0 ? rel : rel.slice(cut + 1)), O_READ);
      } catch {
        continue;
      }
      try {
        if (!fstatSync(fd).isFile()) continue;
        for (const m of list) {
          try {
            if (lineMatches(fd, m, buf)) kept.push({ ...m, path: rel });
          } catch {
            // unreadable now: dropped
          }
        }
      } finally {
        closeSync(fd);
      }
    }
  } finally {
    for (const fd of dirs.values()) closeSync(fd);
  }
  return kept;
}

/** True when the file holds exactly the reported line at the reported offset. */
function lineMatches(fd: number, m: RawMatch, buf: Buffer): boolean {
  if (m.line) {
    const got = Buffer.allocUnsafe(m.line.length);
    return readSyncAll(fd, got, m.offset) === m.line.length && got.equals(m.line);
  }
  const h = createHash('sha256');
  let done = 0;
  while (done < m.lineLength) {
    const n = readSync(fd, buf, 0, Math.min(buf.length, m.lineLength - done), m.offset + done);
    if (n === 0) return false;
    h.update(buf.subarray(0, n));
    done += n;
  }
  return h.digest('hex') === m.digest;
}

function readSyncAll(fd: number, buf: Buffer, pos: number): number {
  let got = 0;
  while (got < buf.length) {
    const n = readSync(fd, buf, got, buf.length - got, pos + got);
    if (n === 0) break;
    got += n;
  }
  return got;
}

function shapeMatch(baseRel: string, m: RawMatch): GrepMatch {
  let bytes = m.window;
  if (m.line) {
    let end = bytes.length;
    if (end > 0 && bytes[end - 1] === 10) end--;
    if (end > 0 && bytes[end - 1] === 13) end--;
    bytes = bytes.subarray(0, end);
  }
  let t = bytes.toString('utf8');
  const out: GrepMatch = { file: joinRel(baseRel, m.path), line: m.lineNumber, column: m.column, text: t };
  if (!m.line || t.length > SEARCH_LIMITS.lineChars) {
    if (!m.line && m.windowStart > 0) t = t.replace(/^[\udc00-\udfff\ufffd]+/, ''); // a character cut at the window start
    out.text = t.slice(0, SEARCH_LIMITS.lineChars);
    out.textTruncated = true;
    if (m.windowStart > 0) out.textColumn = m.windowStart + 1;
  }
  return out;
}

interface GrepOptions {
  pattern: string;
  path: unknown;
  glob?: string;
  maxResults: number;
  fixed: boolean;
  word: boolean;
  timeoutMs: number;
}

/** The filters every ripgrep run shares: hidden files searched, .git never, ignore files honoured. */
function rgFilterArgs(glob: string | undefined): string[] {
  return ['--no-config', '--hidden', '--no-ignore-global', '--no-messages', ...(glob ? ['--glob', glob] : []), '--glob', '!.git'];
}

async function grep(c: Confinement, o: GrepOptions, signal: AbortSignal): Promise<Record<string, unknown>> {
  const started = Date.now();
  const root = searchRoot(c, o.path);
  try {
    const args = ['--json', ...rgFilterArgs(o.glob), ...(o.fixed ? ['--fixed-strings'] : []), ...(o.word ? ['--word-regexp'] : []), '--regexp', o.pattern];
    const run = await runRg(root, args, o.maxResults, signal, o.timeoutMs);
    const stderr = run.stderr.trim();
    if (run.exitCode === 2 && run.matches.length === 0 && !run.sawOutput && stderr !== '' && !run.timedOut) {
      // ripgrep refused the pattern or the glob before searching: its parser's message.
      const what = /glob/i.test(stderr) ? 'glob' : 'pattern';
      throw invalid(`${what}: ${stderr.replace(/^error:\s*/i, '')}`, { field: what, parser: 'ripgrep' });
    }
    const kept = verifyMatches(root.fd, run.matches);
    const results = kept.map((m) => shapeMatch(root.rel, m));
    results.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : a.line - b.line));
    return {
      path: root.rel,
      results,
      count: results.length,
      ...(run.skippedLongLines > 0 ? { skippedLongLines: run.skippedLongLines } : {}),
      truncated: run.truncated || run.timedOut,
      timedOut: run.timedOut,
      durationMs: Date.now() - started,
    };
  } finally {
    closeSync(root.fd);
  }
}

/**
 * Lists the files ripgrep would search under a root-relative directory (ignore rules applied),
 * streaming each root-relative path to `onFile`; stops (truncated) after `maxEntries`.
 */
function rgFiles(c: Confinement, dirRel: string, maxDepth: number | undefined, onFile: (rel: string) => void, maxEntries = SEARCH_LIMITS.maxListedFiles): Promise<{ truncated: boolean }> {
  if (!RG) return Promise.reject(new DaemonError('FAILED_PRECONDITION', 'ripgrep (rg) is not installed in the sandbox image; the symbol index needs it to list files'));
  const root = searchRoot(c, dirRel);
  return new Promise((resolve, reject) => {
    const args = ['--files', '--null', ...rgFilterArgs(undefined), ...(maxDepth !== undefined ? ['--max-depth', String(maxDepth)] : []), '--', './'];
    const child = spawn(RG, args, { cwd: `/proc/self/fd/${root.fd}`, env: childEnv(), stdio: ['ignore', 'pipe', 'ignore'] });
    let rest = '';
    let count = 0;
    let truncated = false;
    const decoder = new StringDecoder('utf8');
    const take = (p: string): void => {
      if (p === '' || truncated) return;
      if (++count > maxEntries) {
        truncated = true;
        child.kill('SIGKILL');
        return;
      }
      onFile(joinRel(root.rel, p.startsWith('./') ? p.slice(2) : p));
    };
    child.stdout.on('data', (d: Buffer) => {
      const parts = (rest + decoder.write(d)).split('\0');
      rest = parts.pop()!;
      for (const p of parts) take(p);
    });
    child.on('error', (e) => {
      closeSync(root.fd);
      reject(new DaemonError('INTERNAL', `ripgrep failed: ${e.message}`));
    });
    child.on('close', () => {
      closeSync(root.fd);
      take(rest + decoder.end());
      resolve({ truncated });
    });
  });
}

// ---------------------------------------------------------------------------------------------
// ctags
// ---------------------------------------------------------------------------------------------

/** Data and doc formats whose "tags" are keys or headings, not definitions: not indexed. */
const EXCLUDED_LANGUAGES = [
  'JSON', 'Markdown', 'ReStructuredText', 'Asciidoc', 'Txt2tags', 'Man', 'Pod', 'Passwd', 'Iniconf',
  'JavaProperties', 'Yaml', 'XML', 'SVG', 'PlistXML', 'RelaxNG', 'DBusIntrospect', 'Glade', 'Maven2',
  'XSLT', 'BibTeX', 'Tex', 'TeXBeamer', 'Diff', 'YumRepo', 'SystemdUnit', 'RpmMacros', 'QemuHX',
];

const CTAGS_ARGS = [
  '--options=NONE',
  '--_interactive=sandbox',
  `--languages=all,${EXCLUDED_LANGUAGES.map((l) => `-${l}`).join(',')}`,
  '--fields=-P+nlKsSZ',
  '--extras=-p',
];

/** Which file names ctags has a parser for (from --list-maps), as one regular expression over base names. */
let nameFilter: RegExp | null | undefined;
function ctagsNameFilter(): RegExp | null {
  if (nameFilter !== undefined) return nameFilter;
  nameFilter = null;
  if (!CTAGS) return null;
  const r = spawnSync(CTAGS, ['--options=NONE', '--list-maps'], { encoding: 'utf8', env: childEnv(), timeout: 10_000 });
  if (r.status !== 0) return null;
  const excluded = new Set(EXCLUDED_LANGUAGES);
  const alternatives: string[] = [];
  for (const line of r.stdout.split('\n')) {
    const parts = line.trim().split(/\s+/);
    if (parts.length < 2 || excluded.has(parts[0]!)) continue;
    for (const pat of parts.slice(1)) alternatives.push(globToRegex(pat));
  }
  nameFilter = alternatives.length ? new RegExp(`^(?:${alternatives.join('|')})$`) : null;
  return nameFilter;
}

function globToRegex(glob: string): string {
  let out = '';
  for (let i = 0; i < glob.length; i++) {
    const ch = glob[i]!;
    if (ch === '*') out += '.*';
    else if (ch === '?') out += '.';
    else if (ch === '[') {
      const end = glob.indexOf(']', i + 1);
      if (end < 0) out += '\\[';
      else {
        out += `[${glob.slice(i + 1, end).replace(/\\/g, '\\\\')}]`;
        i = end;
      }
    } else out += ch.replace(/[.+^${}()|\\]/g, '\\$&');
  }
  return out;
}

interface Tag {
  name: string;
  kind: string;
  line: number;
  language: string;
  scope?: string;
  scopeKind?: string;
  signature?: string;
}

interface CtagsJob {
  rel: string;
  data: Buffer;
  tags: Tag[];
  resolve(tags: Tag[] | null): void;
  timer?: NodeJS.Timeout;
}

/** One long-lived `ctags --_interactive=sandbox`, fed file contents through stdin. */
class CtagsWorker {
  private child: ChildProcessByStdio<Writable, Readable, null> | undefined;
  private readonly inflight: CtagsJob[] = [];
  private pending: Buffer[] = [];
  dead = false;

  constructor() {
    const child = spawn(CTAGS!, CTAGS_ARGS, { cwd: '/', env: childEnv(), stdio: ['pipe', 'pipe', 'ignore'] });
    this.child = child;
    child.stdin.on('error', () => undefined);
    child.stdout.on('data', (chunk: Buffer) => this.onData(chunk));
    child.on('error', () => this.fail());
    child.on('close', () => this.fail());
  }

  get load(): number {
    return this.inflight.length;
  }

  submit(rel: string, data: Buffer): Promise<Tag[] | null> {
    return new Promise((resolve) => {
      if (this.dead || !this.child) return resolve(null);
      const job: CtagsJob = { rel, data, tags: [], resolve };
      this.inflight.push(job);
      this.arm();
      this.child.stdin.write(JSON.stringify({ command: 'generate-tags', filename: rel, size: data.length }) + '\n');
      this.child.stdin.write(data);
    });
  }

  /** Watchdog on the oldest request: a parser stuck on one file kills this worker. */
  private arm(): void {
    const head = this.inflight[0];
    if (head && !head.timer) head.timer = setTimeout(() => this.kill(), SEARCH_LIMITS.ctagsFileTimeoutMs);
  }

  private onData(chunk: Buffer): void {
    let start = 0;
    for (let nl = chunk.indexOf(10); nl !== -1; nl = chunk.indexOf(10, start)) {
      const part = chunk.subarray(start, nl);
      let line: Buffer = part;
      if (this.pending.length > 0) {
        this.pending.push(part);
        line = Buffer.concat(this.pending);
        this.pending = [];
      }
      this.onLine(line.toString('utf8'));
      start = nl + 1;
    }
    if (start < chunk.length) this.pending.push(chunk.subarray(start));
  }

  private onLine(line: string): void {
    let rec: Record<string, unknown>;
    try {
      rec = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    const job = this.inflight[0];
    if (rec._type === 'tag') {
      if (!job || job.tags.length >= SEARCH_LIMITS.tagsPerFile) return;
      const t: Tag = { name: String(rec.name), kind: String(rec.kind ?? ''), line: Number(rec.line ?? 0), language: String(rec.language ?? '') };
      if (typeof rec.scope === 'string') t.scope = rec.scope;
      if (typeof rec.scopeKind === 'string') t.scopeKind = rec.scopeKind;
      if (typeof rec.signature === 'string') t.signature = rec.signature;
      job.tags.push(t);
    } else if (rec._type === 'completed') {
      if (!job) return;
      this.inflight.shift();
      clearTimeout(job.timer);
      job.resolve(job.tags);
      this.arm();
    } else if (rec._type === 'error' && rec.fatal === true) {
      this.kill();
    }
  }

  kill(): void {
    this.child?.kill('SIGKILL');
    this.fail();
  }

  private fail(): void {
    this.dead = true;
    this.child = undefined;
    for (const job of this.inflight.splice(0)) {
      clearTimeout(job.timer);
      job.resolve(null);
    }
  }

  close(): void {
    this.child?.stdin.end();
    this.dead = true;
  }
}

/** A few ctags workers; each file goes to the least loaded one; a dead worker is replaced. */
class CtagsPool {
  private workers: CtagsWorker[] = [];

  constructor(private readonly size: number) {}

  run(rel: string, data: Buffer): Promise<Tag[] | null> {
    this.workers = this.workers.filter((w) => !w.dead);
    let w: CtagsWorker | undefined;
    if (this.workers.length < this.size) {
      w = new CtagsWorker();
      this.workers.push(w);
    } else {
      w = this.workers.reduce((a, b) => (b.load < a.load ? b : a));
    }
    return w.submit(rel, data);
  }

  /** Ends idle workers but one (a later query reuses it). */
  trim(): void {
    this.workers = this.workers.filter((w) => !w.dead);
    for (const w of this.workers.slice(1)) if (w.load === 0) w.close();
    this.workers = this.workers.filter((w) => !w.dead);
  }
}

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

export interface SymbolHit {
  name: string;
  kind: string;
  language: string;
  file: string;
  line: number;
  scope?: string;
  scopeKind?: string;
  signature?: string;
}

class SymbolIndex {
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

  async search(q: { query: string; path: unknown; language?: string; maxResults: number }): Promise<Record<string, unknown>> {
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
class DirCache {
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

// ---------------------------------------------------------------------------------------------
// Methods
// ---------------------------------------------------------------------------------------------

export function searchMethods(c: Confinement): { methods: MethodTable; notify: (rels: string[]) => void } {
  const index = new SymbolIndex(c);
  const timeoutOf = (v: unknown): number =>
    typeof v === 'number' && Number.isInteger(v) && v >= 100 && v <= 600_000 ? v : SEARCH_LIMITS.defaultTimeoutMs;
  const methods: MethodTable = {
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
        if (index.building && index.building.total >= 200) ctx.emit('progress', { ...index.building });
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

/** Every file and search method of the daemon, sharing one confinement; writes keep the symbol index fresh. */
export function workspaceFileMethods(root: string): MethodTable {
  let notify: (rels: string[]) => void = () => undefined;
  const files = fileMethods({ root, onChange: (rels) => notify(rels) });
  const search = searchMethods(files.confinement);
  notify = search.notify;
  return { ...files.methods, ...search.methods };
}

export { FILE_LIMITS };
