/**
 * Wire protocol of the in-sandbox daemon: newline-delimited JSON over a Unix socket.
 *
 *   request   {"id": 7, "method": "exec", "params": {...}}
 *   event     {"id": 7, "event": "stdout", "data": "<base64>"}        0..n, before the reply
 *             {"id": 7, "event": "started", "data": {"execId": "x1", "pid": 12}}
 *   reply     {"id": 7, "result": {...}}
 *          or {"id": 7, "error": {"code": "INVALID_ARGUMENT", "message": "...", "details": {}}}
 *
 * `data` is a base64 string for the byte-stream events (stdout, stderr) and a JSON object for
 * every other event. A request is cancelled with {"id": 8, "method": "cancel", "params": {"id": 7}};
 * the cancelled request still gets exactly one reply (a partial result or a CANCELLED error).
 *
 * This module is shared by the daemon and the runner-side client, so it imports node built-ins only.
 */

/** Bumped whenever the daemon's methods or message shapes change incompatibly (2: sandboxes with seccomp, a locked socket and the orphan bound; a runner replaces older ones at recovery). */
export const DAEMON_VERSION = '2';

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

export type DaemonReply =
  | { id: RequestId; result: unknown }
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

  constructor(private readonly maxLineBytes = MAX_LINE_BYTES) {}

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
      this.pending.push(rest);
    }
    return lines;
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
 * Parameters of `spare`: start one exec starter that waits for an exec (see ExecParams.spare).
 * `fresh` first ends every spare started before (a runner that reattached does not know them).
 */
export interface SpareParams {
  fresh?: boolean;
}

/** Result of `spare`. A spare is ended with `kill` and its id. */
export interface SpareStarted {
  spareId: string;
  /** Pid inside the sandbox's pid namespace. */
  pid: number;
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
}

/** Data of the `started` event of an exec. */
export interface ExecStarted {
  execId: string;
  /** Pid inside the sandbox's pid namespace. */
  pid: number;
}
