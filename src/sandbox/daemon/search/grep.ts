/** search.grep and search.references: ripgrep in a checked directory, every reported line verified against the file itself. */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import { Confinement, fdPath, joinRel } from '../files/index.js';
import { DaemonError, type GrepMatch, type GrepReply } from '../protocol.js';
import { SEARCH_LIMITS, O_DIR_NOFOLLOW, O_READ, invalid, RG, childEnv, searchRoot, type SearchRoot } from './common.js';


// ---------------------------------------------------------------------------------------------
// ripgrep
// ---------------------------------------------------------------------------------------------

export type { GrepMatch } from '../protocol.js';

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
  const rg = RG;
  if (!rg) throw new DaemonError('FAILED_PRECONDITION', 'ripgrep (rg) is not installed in the sandbox image; search is unavailable');
  return new Promise<RgRun>((resolve, reject) => {
    let child: ChildProcessByStdio<null, Readable, Readable>;
    try {
      child = spawn(rg, [...args, '--', root.arg], { cwd: `/proc/self/fd/${root.fd}`, env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
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

export interface GrepOptions {
  pattern: string;
  path: unknown;
  glob?: string;
  maxResults: number;
  fixed: boolean;
  word: boolean;
  timeoutMs: number;
}

/** The filters every ripgrep run shares: hidden files searched, .git never, ignore files honoured. */
export function rgFilterArgs(glob: string | undefined): string[] {
  return ['--no-config', '--hidden', '--no-ignore-global', '--no-messages', ...(glob ? ['--glob', glob] : []), '--glob', '!.git'];
}

export async function grep(c: Confinement, o: GrepOptions, signal: AbortSignal): Promise<GrepReply> {
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
export function rgFiles(c: Confinement, dirRel: string, maxDepth: number | undefined, onFile: (rel: string) => void, maxEntries = SEARCH_LIMITS.maxListedFiles): Promise<{ truncated: boolean }> {
  const rg = RG;
  if (!rg) return Promise.reject(new DaemonError('FAILED_PRECONDITION', 'ripgrep (rg) is not installed in the sandbox image; the symbol index needs it to list files'));
  const root = searchRoot(c, dirRel);
  return new Promise((resolve, reject) => {
    const args = ['--files', '--null', ...rgFilterArgs(undefined), ...(maxDepth !== undefined ? ['--max-depth', String(maxDepth)] : []), '--', './'];
    const child = spawn(rg, args, { cwd: `/proc/self/fd/${root.fd}`, env: childEnv(), stdio: ['ignore', 'pipe', 'ignore'] });
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
