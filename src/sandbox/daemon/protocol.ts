/**
 * Wire protocol of the in-sandbox daemon: newline-delimited JSON over a Unix socket.
 *
 *   request   {"id": 7, "method": "exec", "params": {...}}
 *   event     {"id": 7, "event": "stdout", "data": "<base64>"}        0..n, before the reply
 *             {"id": 7, "event": "started", "data": {"execId": "x1", "pid": 12}}   (not for execs in a spare)
 *   reply     {"id": 7, "result": {...}}
 *          or {"id": 7, "error": {"code": "INVALID_ARGUMENT", "message": "...", "details": {}}}
 *
 * `data` is a base64 string for the byte-stream events (stdout, stderr) and a JSON object for
 * every other event.
 *
 * A reply may carry one body of raw bytes (fs.read's content; exec's stdout when at least
 * RAW_OUTPUT_BYTES of it is kept), so that big content is never escaped into JSON, base64-inflated
 * or parsed on this hop:
 *
 *   body      #1048576\n<1048576 raw bytes>{"id": 7, "result": {..., "content": ""}, "body": {"field": "content", "encoding": "utf-8"}}\n
 *
 * The `#<n>` line announces n bytes that belong to the next message; the client decodes them as
 * `encoding` into result[field] (utf-8 text, or base64 for binary). Only the daemon sends bodies. A request is cancelled with {"id": 8, "method": "cancel", "params": {"id": 7}};
 * the cancelled request still gets exactly one reply (a partial result or a CANCELLED error).
 *
 * This module is shared by the daemon and the runner-side client, so it imports node built-ins only.
 */
import { isAscii } from 'node:buffer';

/** Bumped whenever the daemon's methods or message shapes change incompatibly (2: sandboxes with seccomp, a locked socket and the orphan bound; 3: raw body frames for fs.read; a runner replaces older ones at recovery). exec's stdout as a body did not bump it: every v3 client takes a body for any field. */
export const DAEMON_VERSION = '3';

/** Longest accepted line, in bytes, in either direction. */
export const MAX_LINE_BYTES = 32 * 1024 * 1024;

export type RequestId = number | string;

export interface DaemonRequest {
  id: RequestId;
  method: string;
  params?: unknown;
}

export interface DaemonErrorBody {
  code: DaemonErrorCode;
  message: string;
  details?: Record<string, unknown>;
}

/** Where a reply's raw body goes: result[field], decoded as encoding. */
export interface BodySpec {
  field: string;
  encoding: 'utf-8' | 'base64';
}

export type DaemonReply =
  | { id: RequestId; result: unknown; body?: BodySpec }
  | { id: RequestId | null; error: DaemonErrorBody };

export interface DaemonEvent {
  id: RequestId;
  event: string;
  data: unknown;
}

export type DaemonMessage = DaemonReply | DaemonEvent;

/** The codes the daemon replies with; the runner maps them onto its own error codes. */
export type DaemonErrorCode =
  | 'INVALID_ARGUMENT'
  | 'NOT_FOUND'
  | 'FAILED_PRECONDITION'
  | 'PERMISSION_DENIED'
  | 'CONFLICT'
  | 'RESOURCE_EXHAUSTED'
  | 'NOT_IMPLEMENTED'
  | 'CANCELLED'
  | 'UNAVAILABLE'
  | 'DEADLINE_EXCEEDED'
  | 'INTERNAL';

export class DaemonError extends Error {
  constructor(
    readonly code: DaemonErrorCode,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'DaemonError';
  }

  toBody(): DaemonErrorBody {
    return { code: this.code, message: this.message, details: this.details };
  }
}

export interface PingResult {
  pid: number;
  uid: number;
  version: string;
}

/**
 * Splits a byte stream into lines without holding more than MAX_LINE_BYTES of an unfinished line.
 * Throws when a line grows past the limit; the caller then drops the connection.
 */
export class LineSplitter {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  /** `chunksReused`: the caller reuses each chunk's memory after push (an unfinished line is then copied). */
  constructor(
    private readonly maxLineBytes = MAX_LINE_BYTES,
    private readonly chunksReused = false,
  ) {}

  /** Bytes of an unfinished line held so far. */
  get buffered(): number {
    return this.pendingBytes;
  }

  push(chunk: Buffer): string[] {
    const lines: string[] = [];
    let start = 0;
    for (let nl = chunk.indexOf(10, start); nl !== -1; nl = chunk.indexOf(10, start)) {
      const part = chunk.subarray(start, nl);
      if (this.pendingBytes + part.length > this.maxLineBytes) throw new Error('line too long');
      this.pending.push(part);
      lines.push(Buffer.concat(this.pending).toString('utf8'));
      this.pending = [];
      this.pendingBytes = 0;
      start = nl + 1;
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      this.pendingBytes += rest.length;
      if (this.pendingBytes > this.maxLineBytes) throw new Error('line too long');
      this.pending.push(this.chunksReused ? Buffer.from(rest) : rest);
    }
    return lines;
  }
}

/**
 * A handler's reply whose `field` is sent as a raw body frame instead of inside the JSON line (the
 * JSON carries the field as ''). `decoded()` gives the reply as the client sees it.
 */
export class ReplyWithBody<T extends object> {
  constructor(
    readonly result: T,
    readonly field: keyof T & string,
    readonly bytes: Buffer,
    readonly encoding: BodySpec['encoding'],
  ) {}

  decoded(): T {
    return { ...this.result, [this.field]: decodeBody(this.bytes, this.encoding) };
  }
}

export function decodeBody(bytes: Buffer, encoding: BodySpec['encoding']): string {
  if (encoding === 'base64') return bytes.toString('base64');
  // ASCII (most source text) is copied as Latin-1, the same string, without UTF-8 decoding.
  return isAscii(bytes) ? bytes.toString('latin1') : bytes.toString('utf8');
}

/** The header line of a body frame. */
export function bodyHeader(bytes: number): string {
  return `#${bytes}\n`;
}

/**
 * Splits the daemon's output into messages: lines, each with the raw body announced just before it
 * (see the module comment). Never holds more than maxBytes of an unfinished line or body; throws
 * past it (the caller then drops the connection).
 */
export class FrameReader {
  private readonly lines: LineSplitter;
  private bodyWant = -1;
  private bodyParts: Buffer[] = [];
  private bodyHave = 0;
  private body: Buffer | undefined;
  /** With reused chunks, the body being read: allocated once at its announced size and filled. */
  private bodyBuf: Buffer | undefined;

  /**
   * `chunksReused`: the caller reads every chunk into the same memory (net's `onread` with one
   * buffer), so nothing is kept by reference: a body is copied into a Buffer of its announced size,
   * an unfinished line is copied. It spares a megabyte-sized body the socket's own chunk Buffers
   * (external memory V8 counts toward its next full collection).
   */
  constructor(
    private readonly maxBytes = MAX_LINE_BYTES,
    private readonly chunksReused = false,
    /** Where a body of n bytes is read into (at least n bytes; only its first n are used). */
    private readonly allocBody: (n: number) => Buffer = (n) => Buffer.allocUnsafeSlow(n),
  ) {
    this.lines = new LineSplitter(maxBytes, chunksReused);
  }

  push(chunk: Buffer): Array<{ line: string; body?: Buffer }> {
    const out: Array<{ line: string; body?: Buffer }> = [];
    let rest: Buffer | undefined = chunk;
    while (rest && rest.length > 0) {
      if (this.bodyWant >= 0) {
        const take = Math.min(this.bodyWant - this.bodyHave, rest.length);
        if (this.chunksReused) {
          this.bodyBuf ??= this.allocBody(this.bodyWant).subarray(0, this.bodyWant);
          rest.copy(this.bodyBuf, this.bodyHave, 0, take);
        } else this.bodyParts.push(rest.subarray(0, take));
        this.bodyHave += take;
        rest = rest.subarray(take);
        if (this.bodyHave === this.bodyWant) {
          this.body = this.bodyBuf ?? (this.bodyParts.length === 1 ? this.bodyParts[0]! : Buffer.concat(this.bodyParts, this.bodyHave));
          this.bodyParts = [];
          this.bodyBuf = undefined;
          this.bodyWant = -1;
        }
        continue;
      }
      // Lines up to the next body header (a line starting with '#'), handled one at a time.
      const nl = rest.indexOf(10);
      if (nl === -1) {
        for (const line of this.lines.push(rest)) out.push(this.take(line));
        break;
      }
      for (const line of this.lines.push(rest.subarray(0, nl + 1))) {
        if (line.startsWith('#')) {
          const n = Number(line.slice(1));
          if (!Number.isSafeInteger(n) || n < 0 || n > this.maxBytes) throw new Error('bad body frame');
          this.bodyWant = n;
          this.bodyHave = 0;
          if (n === 0) {
            this.body = Buffer.alloc(0);
            this.bodyWant = -1;
          }
        } else out.push(this.take(line));
      }
      rest = rest.subarray(nl + 1);
    }
    return out;
  }

  private take(line: string): { line: string; body?: Buffer } {
    const body = this.body;
    this.body = undefined;
    return body ? { line, body } : { line };
  }
}

/** One message as a protocol line. */
export function encodeMessage(msg: DaemonMessage | DaemonRequest): string {
  return JSON.stringify(msg) + '\n';
}

/** Parameters of the daemon's `exec` method. */
export interface ExecParams {
  /** Exact argv; argv[0] is looked up in PATH. Exactly one of argv and command. */
  argv?: string[];
  /** A shell command line, run with `/bin/bash -c` (or /bin/sh when bash is missing). */
  command?: string;
  /** Working directory relative to the workspace root (absolute paths must stay inside it). */
  cwd?: string;
  /** Merged over the sandbox's base environment. */
  env?: Record<string, string>;
  /** Bytes for the process's stdin, base64; stdin is closed after them (or at once when absent). */
  stdin?: string;
  timeoutMs?: number;
  /** Bytes kept per stream (head and tail halves). */
  maxOutputBytes?: number;
  /** On timeout or cancel: SIGTERM first and SIGKILL after this many ms; 0 (default) kills at once. */
  killGraceMs?: number;
  /** Send stdout/stderr events as the process writes. */
  stream?: boolean;
  /**
   * End what the command leaves running in its process group (`cmd &`, `nohup`) when it returns,
   * and count it in the result's backgroundEnded. Sent unless the caller keeps background work
   * (ExecRequest.keepBackground); the bubblewrap driver leaves it out, its exec cgroup does this.
   */
  endLeftovers?: boolean;
  /**
   * Start the process stopped before exec (after the `started` event) until a `release` call, so
   * the runner can move it into a per-exec cgroup first. An exec not released within 10 s is
   * killed and fails with FAILED_PRECONDITION.
   */
  hold?: boolean;
  /**
   * Run the command in this spare exec starter (from `spare`, already placed in its exec cgroup by
   * the runner) instead of a new process. A spare that is gone fails with NOT_FOUND and
   * details.spare, and the caller starts the exec another way. Not with hold.
   */
  spare?: string;
}

/**
 * Parameters of `spare`: start exec starters that wait for an exec (see ExecParams.spare).
 * `fresh` first ends every spare started before (a runner that reattached does not know them).
 * `count` (1-16, default 1) starters are started together, with one process start in the daemon.
 */
export interface SpareParams {
  fresh?: boolean;
  count?: number;
}

/** Result of `spare`: the first starter, and in `more` the others of the same `count`. A spare is ended with `kill` and its id. */
export interface SpareStarted {
  spareId: string;
  /** Pid inside the sandbox's pid namespace. */
  pid: number;
  more?: Array<{ spareId: string; pid: number }>;
}

/** Result of a command, from the daemon's `exec` or from an ephemeral sandbox. */
export interface ExecResult {
  /** Exit status, or null when the process ended by a signal. */
  exitCode: number | null;
  /** Name of the terminating signal, e.g. "SIGKILL", or null. */
  signal: string | null;
  timedOut: boolean;
  /** Ended because the caller cancelled it. */
  cancelled: boolean;
  /** Kept output (UTF-8, see maxOutputBytes); the omitted middle is marked "[... N bytes omitted ...]". */
  stdout: string;
  stderr: string;
  /** Bytes the process wrote to each stream in total. */
  stdoutBytes: number;
  stderrBytes: number;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  durationMs: number;
  /**
   * Processes the command left running that were ended when it returned (ExecParams.endLeftovers
   * in the daemon: its process group, `cmd &` and `nohup`; the bubblewrap driver adds what its exec
   * cgroup ended, `setsid` ones included). Absent when none was.
   */
  backgroundEnded?: number;
}

/** Data of the `started` event of an exec (sent for execs that do not run in a spare: the runner places those by this pid). */
export interface ExecStarted {
  execId: string;
  /** Pid inside the sandbox's pid namespace. */
  pid: number;
}

// ---------------------------------------------------------------------------------------------
// Methods: every method's params and reply, shared by the daemon (each handler's reply type is
// checked against DaemonMethods, see server.ts `Handlers`) and the runner (DaemonClient.request and
// Executor.request take a method name and check its params and reply).
// ---------------------------------------------------------------------------------------------

/** Kinds of directory entries, as fs.list reports them. */
export type EntryType = 'file' | 'directory' | 'symlink' | 'fifo' | 'socket' | 'char-device' | 'block-device' | 'other';

export type FsListParams = {
  /** Workspace-relative directory (default '.'). */
  path?: string;
  limit?: number;
  /** Resume after this name (names sort bytewise), or at `index`. */
  after?: string;
  index?: number;
};

export type FsListEntry = {
  name: string;
  path: string;
  type: EntryType;
  size: number;
  mode: string;
  mtime: string;
  linkTarget?: string;
};

export type FsListReply = {
  path: string;
  entries: FsListEntry[];
  total: number;
  nextIndex: number;
  last: string | null;
  hasMore: boolean;
};

export type FsReadParams = {
  path: string;
  offset?: number;
  limit?: number;
  /** CONFLICT when the file's SHA-256 no longer starts with this (a cursor's guard). */
  expectSha256Prefix?: string;
  /** The runner can take the open descriptor instead of the bytes (files/read.ts, src/sandbox/handoff.ts). */
  handOff?: boolean;
  /** Descriptors handed off earlier that the runner has taken: closed first (fs.release without a message of its own). */
  release?: number[];
};

export type FsReadReply = {
  path: string;
  realPath: string;
  size: number;
  sha256: string;
  mode: string;
  offset: number;
  length: number;
  encoding: 'utf-8' | 'base64';
  content: string;
  eof: boolean;
  nextOffset: number;
  /**
   * Set instead of a body when the descriptor was handed off: the runner duplicates `fd` out of the
   * daemon, reads `length` bytes at `offset` itself, cuts and encodes them (shapeRange), and releases
   * the daemon's descriptor (`release` of its next fs.read, or fs.release within a second). `ino` is
   * the file's inode (a decimal string), checked on the copy.
   */
  handOff?: { fd: number; ino: string };
};

export type FsReleaseParams = { fds: number[] };
export type FsReleaseReply = { released: number };

/** One file to write: `content`, or `contentBase64` (its UTF-8 bytes) when JSON escaping would bloat it. */
export type FsWriteFile = {
  path: string;
  content?: string;
  contentBase64?: string;
  expectedSha256?: string;
};

export type FsWriteParams = FsWriteFile;

export type WriteResult = {
  path: string;
  realPath: string;
  sha256: string;
  size: number;
  created: boolean;
  mode: string;
};

export type FsWriteBatchParams = {
  files: FsWriteFile[];
  createParents?: boolean;
  atomic?: boolean;
};

export type FsWriteBatchReply =
  | { atomic: true; written: number; failed: 0; files: WriteResult[] }
  | { atomic: false; written: number; failed: number; files: Array<({ ok: true } & WriteResult) | { ok: false; path: string; error: DaemonErrorBody }> };

export type FsPatchParams = {
  path: string;
  oldText: string;
  newText: string;
  expectedSha256?: string;
};

export type FsPatchReply = WriteResult & {
  previousSha256: string;
  replacements: 1;
  line: number;
  column: number;
};

export type FsDeleteParams = {
  path: string;
  expectedSha256?: string;
  recursive?: boolean;
};

export type FsDeleteReply = {
  path: string;
  realPath: string;
  type: EntryType;
  deleted: true;
  removedEntries: number;
};

export type FsMoveParams = {
  source: string;
  destination: string;
  overwrite?: boolean;
};

export type FsMoveReply = {
  source: string;
  destination: string;
  realSource: string;
  realDestination: string;
  type: EntryType;
  overwritten: boolean;
  moved: true;
};

export type FsMkdirParams = {
  path: string;
  recursive?: boolean;
};

export type FsMkdirReply = {
  path: string;
  realPath: string;
  created: boolean;
  createdDirectories: string[];
};

export type GrepParams = {
  /** A ripgrep regular expression. */
  pattern: string;
  path?: string;
  /** A ripgrep glob (gitignore dialect: `*` stays within a path segment, `**` crosses them). */
  glob?: string;
  maxResults?: number;
  timeoutMs?: number;
};

export type GrepMatch = {
  file: string;
  line: number;
  /** 1-based byte column of the first match on the line (ripgrep's convention). */
  column: number;
  /** The line without its line ending; a long line is cut to a window around the match. */
  text: string;
  /** Present (true) when text is only part of the line. */
  textTruncated?: boolean;
  /** With textTruncated: the 1-based byte column of the line where text starts. */
  textColumn?: number;
};

export type GrepReply = {
  path: string;
  results: GrepMatch[];
  count: number;
  skippedLongLines?: number;
  truncated: boolean;
  timedOut: boolean;
  durationMs: number;
};

export type ReferencesParams = Omit<GrepParams, 'pattern'> & {
  /** Whole-word, literal occurrences of this text. */
  symbol: string;
};

export type ReferencesReply = GrepReply & {
  symbol: string;
};

export type SymbolsParams = {
  query: string;
  path?: string;
  language?: string;
  maxResults?: number;
};

export type SymbolHit = {
  name: string;
  kind: string;
  language: string;
  file: string;
  line: number;
  scope?: string;
  scopeKind?: string;
  signature?: string;
};

export type SymbolsReply = {
  symbols: SymbolHit[];
  count: number;
  total: number;
  truncated: boolean;
  index: {
    files: number;
    symbols: number;
    partial: boolean;
    freshness: 'inotify' | 'rescan-per-query';
    watchedDirectories: number;
    refresh: { reindexed: number; removed: number; full: boolean; ms: number };
  };
};

/** Data of a search.symbols `progress` event while the index is built. */
export type SymbolsProgress = {
  done: number;
  total: number;
};

export type ClientProfile = 'all' | 'profile_a' | 'profile_b' | 'profile_c' | 'profile_d';
export type ConcreteProfile = Exclude<ClientProfile, 'all'>;
export type OverviewSection = 'instructions' | 'languages' | 'test_commands' | 'skills';

export type OverviewOptions = {
  /** Repository directory (the workspace checkout, /workspace in the sandbox). Absolute. */
  root: string;
  clientProfile: ClientProfile;
  include: OverviewSection[];
  contentMode: 'none' | 'excerpt';
  /** 4096..131072: total bytes (UTF-8) of excerpted text across all instruction files. */
  maxBytes: number;
  /** Cap on files walked; default 200000. */
  maxFiles?: number;
  /** Stop walking after this many milliseconds (default 5000) and report partial. */
  deadlineMs?: number;
};

export type LanguageShare = {
  language: string;
  files: number;
  /** Share of the counted source files, 0..1, rounded to 3 decimals. */
  share: number;
};

export type TestCommand = {
  command: string;
  /** Where it was found, e.g. "package.json scripts.test". */
  source: string;
  /** npm, pnpm, yarn, bun, make, just, task, pytest, tox, nox, cargo, go, maven, gradle, ... */
  kind: string;
};

export type InstructionFile = {
  /** Path relative to the root, '/'-separated (the link's path when the file is a symlink). */
  path: string;
  /** Every concrete profile that honours this file (not only the requested one). */
  profiles: ConcreteProfile[];
  bytes: number;
  sha256: string;
  /** contentMode excerpt only: the first bytes of the file, cut on a UTF-8 character boundary. */
  excerpt?: string;
  /** contentMode excerpt only: true when the excerpt is shorter than the file. */
  truncated?: boolean;
};

export type RepositorySkill = {
  name: string;
  /** Directory holding SKILL.md, relative to the root. */
  path: string;
  description?: string;
};

export type RepositoryOverview = {
  languages?: LanguageShare[];
  testCommands?: TestCommand[];
  instructions?: InstructionFile[];
  skills?: RepositorySkill[];
  partial: boolean;
  filesScanned: number;
};

/** The overview's params: the root is always the daemon's own workspace root. */
export type OverviewParams = Omit<OverviewOptions, 'root'> & { root?: string };

export type PtyOpenParams = {
  cwd?: string;
  cols?: number;
  rows?: number;
  env?: Record<string, string>;
};

export type PtyOpenReply = {
  ptyId: string;
  pid: number | undefined;
  cols: number;
  rows: number;
};

export type PtyIoParams = {
  ptyId: string;
  /** Text written to the terminal first. */
  input?: string;
  /** Where to read from (a previous reply's cursor); absent: the oldest output kept. */
  cursor?: number;
  waitMs?: number;
  maxBytes?: number;
};

export type PtyIoReply = {
  output: string;
  cursor: number;
  droppedBytes: number;
  exited: boolean;
  exitCode: number | null;
  signal: string | null;
  more: boolean;
};

export type PtyListReply = {
  terminals: Array<{ ptyId: string; pid: number | undefined; exited: boolean; bytes: number; createdAt: string }>;
};

/** Parameters of `env.set`: a flat object of strings (names without = or NUL). */
export type EnvSetParams = { env: Record<string, string> };

// Code intelligence (issue #44, lsp/): language servers inside the sandbox. Lines and columns are
// 1-based; a column counts Unicode code points (lsp/positions.ts).

/** The operator's settings, sent with every code.* call (the daemon keeps the last ones). */
/** A server the operator added in the config file (codeIntel.servers); its id is `custom:<name>`. */
export type CodeCustomServer = {
  name: string;
  /** Absolute path of the program inside the sandbox. */
  command: string;
  args?: string[];
  /** File extensions (with the dot) to LSP language ids; these win over the built-in servers'. */
  extensions: Record<string, string>;
  initializationOptions?: unknown;
  /** What workspace/configuration answers, by section. */
  settings?: Record<string, unknown>;
  /** The operator vouches that it runs no repository code (default false: exec_run callers only). */
  runsNoRepositoryCode?: boolean;
};
export type CodeSettings = { idleMs?: number; disabled?: string[]; custom?: CodeCustomServer[] };
/** Fields every code.* call may carry: the operator's settings, and `restricted` when the caller could not run exec_run (only servers that run no repository code answer it). */
export type CodeCallParams = { settings?: CodeSettings; restricted?: boolean };
export type CodeServerId = 'typescript' | 'python' | 'clangd' | 'gopls' | 'bash' | `custom:${string}`;
export type CodePoint = { line: number; column: number };
export type CodeRange = { start: CodePoint; end: CodePoint };

/** A position: path with line and column, or path with symbol (and optionally line to choose among several). */
export type CodePositionParams = CodeCallParams & { path: string; line?: number; column?: number; symbol?: string };

/** A place in the code: a workspace path, or (outsideWorkspace) a file of a library or the system, never a host path. */
export type CodeLocation = {
  path: string | null;
  outsideWorkspace?: true;
  /** Outside the workspace: where (atelier: Atelier's bundled libraries such as TypeScript's lib.*.d.ts or pyright's typeshed; system: the sandbox's /usr). */
  external?: { root: 'atelier' | 'system' | 'sandbox' | 'uri'; path: string };
  range: CodeRange;
  /** The text of the range's first line (cut at 400 characters: textTruncated). */
  text: string;
  textTruncated?: true;
};

/** `restarts`: how often the answering server was started again in this sandbox (for the runner's /metrics). */
export type CodeResolved = { server: CodeServerId; restarts: number; path: string; position: CodePoint; symbol?: string; candidates?: number };

export type CodeSymbol = { name: string; kind: string; detail?: string; container?: string; depth?: number } & CodeLocation;

export type CodeDiagnostic = { severity: 'error' | 'warning' | 'information' | 'hint'; message: string; code?: string; source?: string } & CodeLocation;

export type CodeServerStatus = {
  server: CodeServerId;
  title: string;
  state: 'running' | 'starting' | 'stopped' | 'crashed' | 'disabled' | 'not_installed';
  pid?: number;
  startedAt?: string;
  openDocuments?: number;
  /** A running server's resident memory: its process and their descendants (VmRSS from /proc). */
  memoryBytes?: number;
  restarts: number;
  crashesInWindow: number;
  lastExit?: { at: string; reason: string; expected: boolean };
  missing?: string;
  runsNoRepositoryCode: boolean;
  requests: number;
  compileDatabase?: { source: string; entries: number; removedFlags: number; note?: string };
};

export type CodeRenameFile = { path: string; sha256: string; edits: number; before: string; after: string };

/**
 * Every method of the daemon: its params (what the runner sends; the daemon still validates them,
 * they come off a socket) and its reply.
 */
export type DaemonMethods = {
  ping: { params: Record<string, never> | undefined; reply: PingResult };
  cancel: { params: { id: RequestId }; reply: { cancelled: boolean } };
  /** Turns a fresh connection into a byte relay to a loopback port (relay.ts); the runner's openRelay only. */
  relay: { params: { port: number }; reply: { relayed: true; address: '127.0.0.1' | '::1' } };
  exec: { params: ExecParams; reply: ExecResult };
  release: { params: { execId: string }; reply: { released: true } };
  spare: { params: SpareParams | undefined; reply: SpareStarted };
  kill: { params: { execId: string; signal?: NodeJS.Signals }; reply: { signalled: true } };
  'pty.open': { params: PtyOpenParams; reply: PtyOpenReply };
  'pty.io': { params: PtyIoParams; reply: PtyIoReply };
  'pty.close': { params: { ptyId: string }; reply: { closed: true; alreadyClosed: boolean } };
  'pty.list': { params: Record<string, never> | undefined; reply: PtyListReply };
  /** The environment commands start from, replaced whole (env.ts): for a Pod started before its workspace was known. */
  'env.set': { params: EnvSetParams; reply: { set: number } };
  overview: { params: OverviewParams; reply: RepositoryOverview };
  'fs.list': { params: FsListParams; reply: FsListReply };
  'fs.read': { params: FsReadParams; reply: FsReadReply };
  'fs.release': { params: FsReleaseParams; reply: FsReleaseReply };
  'fs.write': { params: FsWriteParams; reply: WriteResult };
  'fs.writeBatch': { params: FsWriteBatchParams; reply: FsWriteBatchReply };
  'fs.patch': { params: FsPatchParams; reply: FsPatchReply };
  'fs.delete': { params: FsDeleteParams; reply: FsDeleteReply };
  'fs.move': { params: FsMoveParams; reply: FsMoveReply };
  'fs.mkdir': { params: FsMkdirParams; reply: FsMkdirReply };
  'search.grep': { params: GrepParams; reply: GrepReply };
  'search.references': { params: ReferencesParams; reply: ReferencesReply };
  'search.symbols': { params: SymbolsParams; reply: SymbolsReply };
  'code.status': { params: CodeCallParams | undefined; reply: { servers: CodeServerStatus[] } };
  'code.definition': { params: CodePositionParams & { kind?: 'definition' | 'declaration' | 'typeDefinition' | 'implementation' }; reply: CodeResolved & { locations: CodeLocation[] } };
  'code.references': { params: CodePositionParams & { includeDeclaration?: boolean; offset?: number; limit?: number }; reply: CodeResolved & { locations: CodeLocation[]; total: number } };
  'code.hover': { params: CodePositionParams; reply: CodeResolved & { contents: string; contentsTruncated?: true; range?: CodeRange } };
  'code.symbols': { params: CodeCallParams & { path?: string; query?: string; server?: CodeServerId; maxResults?: number }; reply: { servers: CodeServerId[]; symbols: CodeSymbol[]; total: number; truncated: boolean } };
  'code.diagnostics': {
    params: CodeCallParams & { path?: string; waitMs?: number; minSeverity?: CodeDiagnostic['severity']; maxResults?: number };
    reply: { servers: CodeServerId[]; diagnostics: CodeDiagnostic[]; total: number; truncated: boolean; files: number; pending: string[]; complete: boolean };
  };
  'code.rename': { params: CodePositionParams & { newName: string }; reply: CodeResolved & { files: CodeRenameFile[] } };
};

export type DaemonMethod = keyof DaemonMethods;
export type ParamsOf<M extends DaemonMethod> = DaemonMethods[M]['params'];
export type ReplyOf<M extends DaemonMethod> = DaemonMethods[M]['reply'];
