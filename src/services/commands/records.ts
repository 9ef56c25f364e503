/**
 * The records of commands (docs/commands.md): run states, the calls run as MCP tasks and what
 * they are handed, what the command service is given, and the output logs of runs.
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import type { DB } from '../../store/db.js';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import type { AuditLog } from '../instance/index.js';
import type { CursorCodec } from '../../core/cursor.js';
import type { EphemeralBind, Executor, ExecResult } from '../../sandbox/executor.js';
import type { WorkspaceService } from '../workspaces/index.js';

export type RunState = 'pending' | 'running' | 'succeeded' | 'failed' | 'timed_out' | 'cancelled' | 'dependency_failed' | 'interrupted';
export const ENDED: RunState[] = ['succeeded', 'failed', 'timed_out', 'cancelled', 'dependency_failed', 'interrupted'];
export const OUTPUT_PAGE = 65536;
/** Calls older than this are looked at for removal (each by its own time to live, which is at least this). */
export const CALL_TTL_SCAN_MS = 60 * 60 * 1000;

export interface Deps {
  db: DB;
  config: Config;
  log: Logger;
  audit: AuditLog;
  cursors: CursorCodec;
  executor: Executor;
  workspaces: WorkspaceService;
  /** Managed packages: the owner-bound releases the toolbox mounts. */
  packages?: { mountsFor(workspaceId: null): Promise<{ mounts: EphemeralBind[]; env: Record<string, string> }> };
}

export interface Running {
  abort: AbortController;
  done: Promise<void>;
}

/** How a tool call run as an MCP task ended: the call's result, or the protocol error it failed with. */
export type CallOutcome = { result: Record<string, unknown>; isError: boolean } | { error: { code: number; message: string; data?: unknown } };

/** A tool call run as an MCP task, as its operation records it (docs/mcp-tasks.md). */
export interface CallRecord {
  id: string;
  tool: string;
  workspaceId: string | null;
  principal: string;
  /** The grant it was started under (JSON of the caller's access, operations and agent). */
  binding: string;
  state: RunState;
  reason: string | null;
  result: Record<string, unknown> | null;
  error: { code: number; message: string; data?: unknown } | null;
  /** What the call waits for from the client (an approval to open), while it waits. */
  input: Record<string, unknown> | null;
  statusMessage: string | null;
  createdAt: string;
  updatedAt: string;
  endedAt: string | null;
  ttlMs: number;
}

/** What a call run as a task is handed: its signal, and where its live output and status go. */
export interface CallHandle {
  id: string;
  signal: AbortSignal;
  /** Appends to the operation's output log (operation_status reads it), within the output cap. */
  output(chunk: Buffer): void;
  /** A short line on where the call is (kept in memory while it runs; the last one is recorded). */
  status(message: string): void;
  /** The input the call waits for (null when it no longer waits); recorded at once. */
  input(request: Record<string, unknown> | null): void;
}

/**
 * A run's output log. Its bytes are the workspace's: a write that fails (ENOSPC, EIO) must not end
 * the runner (an 'error' with no listener would), so it ends the log and says so through onError.
 */
export function outputLog(file: string, onError: () => void): WriteStream {
  const out = createWriteStream(file, { flags: 'a', mode: 0o600 });
  out.on('error', onError);
  return out;
}

/** Ends a log (when there is one) and waits until it is closed, written or failed. */
export function closeLog(out: WriteStream | undefined): Promise<void> {
  if (!out || out.closed) return Promise.resolve();
  return new Promise<void>((resolve) => {
    out.once('close', () => resolve());
    out.end();
  });
}

export function stateOf(result: ExecResult): { state: RunState; reason: string | null } {
  if (result.cancelled) return { state: 'cancelled', reason: 'cancelled' };
  if (result.timedOut) return { state: 'timed_out', reason: 'the time limit passed; the whole process tree was killed' };
  if (result.exitCode === 0) return { state: 'succeeded', reason: null };
  return { state: 'failed', reason: result.signal ? `ended by ${result.signal}` : `exit code ${result.exitCode}` };
}


