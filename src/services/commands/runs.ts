/**
 * Commands beyond one synchronous exec. CommandService is this module's class on three others,
 * each read alone: terminals.ts (shells and sessions) on operations.ts (async operations and tool
 * calls run as MCP tasks) on tasks.ts (launching a run with its output on disk, and tasks with
 * dependencies); records.ts has the states and records. Here: privileged runs (their grants come
 * from services/approvals) and the toolbox, start-up, a workspace's cleanup and shutdown. Owns
 * tables: operations, tasks, terminals (through the modules above). State names: docs/commands.md.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { ExecResult } from '../../sandbox/executor.js';
import { ServiceError } from '../../core/errors.js';
import { nowIso } from '../../core/clock.js';
import { CommandTerminals } from './terminals.js';

export type { CallHandle, CallOutcome, CallRecord, RunState } from './records.js';
/** The named results of the modules below (what the tools' runs answer). */
export type { CommandRunTaskResult, CommandTaskStatusResult, CommandTaskCancelResult, CommandListTasksResult, CommandGraphResult } from './tasks.js';
export type { CommandStartOperationResult, CommandOperationStatusResult, CommandOperationWaitResult, CommandOperationCancelResult } from './operations.js';
export type { CommandOpenTerminalResult, CommandTerminalIoResult, CommandCloseTerminalResult, CommandListSessionsResult } from './terminals.js';

export class CommandService extends CommandTerminals {
  /**
   * The working directory of a privileged run as its grant binds it and the owner sees it: relative
   * to the workspace, `.` and empty segments dropped (`./src/` is `src`, `.` is `.`). Refused before
   * any approval is asked for or spent: absolute, `..` anywhere, a NUL, or (checked through the
   * workspace daemon, as the workspace user, like every exec) missing or not a directory.
   */
  async privilegedCwd(workspaceId: string, cwd: string, signal?: AbortSignal): Promise<string> {
    if (cwd.includes('\0')) throw new ServiceError('INVALID_ARGUMENT', 'cwd: NUL characters are not allowed in a path', { field: 'cwd' });
    const parts = cwd.split('/').filter((p) => p !== '' && p !== '.');
    if (cwd.startsWith('/') || parts.includes('..')) throw new ServiceError('PERMISSION_DENIED', `cwd: ${JSON.stringify(cwd)} leaves the workspace (privileged runs take a workspace-relative directory without ..)`, { field: 'cwd' });
    const rel = parts.join('/') || '.';
    await this.deps.workspaces.activeHandle(workspaceId);
    await this.checkCwd(workspaceId, rel, signal);
    return rel;
  }

  /**
   * Runs an approved privileged command: uid 0 in its own user namespace, workspace bound, no
   * network. `cwd` is what privilegedCwd returned (the directory the grant binds).
   */
  async runPrivileged(workspaceId: string, command: string, cwd: string, timeoutMs: number, maxOutputBytes: number, signal: AbortSignal): Promise<ExecResult> {
    await this.deps.workspaces.activeHandle(workspaceId);
    const root = this.deps.workspaces.rootDir(workspaceId);
    const parts = cwd.split('/').filter((p) => p !== '' && p !== '.');
    if (cwd.startsWith('/') || parts.includes('..')) throw new ServiceError('PERMISSION_DENIED', `cwd: ${cwd} leaves the workspace`, { field: 'cwd' });
    return this.deps.executor.runEphemeral({
      binds: [
        { source: join(root, 'repo'), target: '/workspace' },
        { source: join(root, 'home'), target: '/home/user' },
      ],
      limits: this.deps.workspaces.sandboxLimits,
      network: 'none',
      command,
      cwd: parts.length ? `/workspace/${parts.join('/')}` : '/workspace',
      timeoutMs,
      maxOutputBytes,
      signal,
      privileged: true,
    });
  }

  /** The bash toolbox target: a disposable sandbox with no network, checkout, secrets or workspace. */
  async runToolbox(command: string, timeoutMs: number, maxOutputBytes: number, signal: AbortSignal): Promise<ExecResult> {
    if (!this.deps.config.packagesEnabled)
      throw new ServiceError('FAILED_PRECONDITION', 'target: the toolbox exists only when the operator enables managed packages (--packages-enabled / ATELIER_PACKAGES_ENABLED); use target workspace', { field: 'target' });
    // The owner-bound managed-package releases, read-only, their binaries on PATH.
    const pkgs = (await this.deps.packages?.mountsFor(null)) ?? { mounts: [], env: {} };
    return this.deps.executor.runEphemeral({
      binds: pkgs.mounts,
      limits: this.deps.workspaces.sandboxLimits,
      network: 'none',
      command,
      env: pkgs.env,
      cwd: '/tmp',
      timeoutMs,
      maxOutputBytes,
      signal,
    });
  }

  // ---------- restart and cleanup ----------

  /** After a restart: what was running is interrupted (its output so far stays readable). */
  startup(): void {
    const why = 'interrupted by a service restart; output so far is kept';
    const now = nowIso();
    this.deps.db.prepare("UPDATE operations SET state = 'interrupted', reason = ?, ended_at = ?, updated_at = ? WHERE state = 'running'").run(why, now, now);
    this.deps.db.prepare("UPDATE tasks SET state = 'interrupted', reason = ?, ended_at = ? WHERE state = 'running'").run(why, nowIso());
    this.deps.db.prepare("UPDATE terminals SET state = 'interrupted', reason = ?, closed_at = ? WHERE state = 'open'").run('the terminal ended with the service restart', nowIso());
    this.deps.db.prepare('UPDATE operations SET input_json = NULL, updated_at = ? WHERE principal IS NOT NULL AND input_json IS NOT NULL').run(nowIso());
    const ws = this.deps.db.prepare("SELECT DISTINCT workspace_id FROM tasks WHERE state = 'pending'").pluck().all() as string[];
    for (const w of ws) this.schedule(w);
    this.pruneCalls();
  }

  /** When a workspace closes: stop what runs and remove its output files. */
  async forgetWorkspace(workspaceId: string): Promise<void> {
    const ids = [
      ...(this.deps.db.prepare('SELECT id FROM operations WHERE workspace_id = ?').pluck().all(workspaceId) as string[]),
      ...(this.deps.db.prepare('SELECT id FROM tasks WHERE workspace_id = ?').pluck().all(workspaceId) as string[]),
    ];
    for (const id of ids) this.running.get(id)?.abort.abort();
    for (const id of ids) await rm(join(this.outDir, `${id}.log`), { force: true });
  }

  async shutdown(): Promise<void> {
    this.stopping = true;
    for (const r of this.running.values()) r.abort.abort();
    await Promise.all([...this.running.values()].map((r) => r.done.catch(() => undefined)));
  }
}
