/**
 * The commands domain's tools (services/commands): spec section "Commands and shells" (8 tools:
 * exec_run, bash, shell_*, operation_*) and spec section "Sessions and tasks" (9 tools: the
 * terminal sessions sessions_* and the tasks tasks_*), each its own list in spec order.
 */
import { defineTool } from './define.js';
import { ServiceError } from '../core/errors.js';
import { withFields } from '../core/raw-text.js';
import { ApprovalService } from '../services/approvals.js';
import { CUR, IDEM, OPID, PATH, SESSID, SHID, TASKID, WSID, int, name, str, z } from './types.js';

const domain = 'Commands and shells';
const sessionsDomain = 'Sessions and tasks';

/** A call that keeps a log (an MCP task, docs/mcp-tasks.md) also gets the output as it comes; the result is the same. */
const streamTo = (output: ((chunk: Buffer) => void) | undefined) => (output ? (_stream: 'stdout' | 'stderr', chunk: Buffer) => output(chunk) : undefined);

/**
 * exec_run's (and bash's) word on what the command left running (issue #42 item 8): when the
 * driver ended processes the command left behind (`cmd &`, `nohup`, `setsid`), the result carries
 * backgroundEnded (how many) and this note; nothing when none was left.
 */
function withBackgroundNote(result: Record<string, unknown>): Record<string, unknown> {
  const n = result.backgroundEnded;
  if (typeof n !== 'number' || n <= 0) return result;
  const what = n === 1 ? '1 process' : `${n} processes`;
  result.backgroundNote = `${what} the command left running (started with &, nohup or setsid) ${n === 1 ? 'was' : 'were'} ended when it returned; start a server or other long-running process with tasks_run, which keeps it running`;
  return result;
}

const COMMAND = str(1, 32768).describe('Shell command line to run (1-32768 characters)');
const TIMEOUT_MS = int(100, 300000).default(60000).describe('Time limit in milliseconds (100-300000); the command is killed when it passes');
const MAX_OUTPUT_BYTES = int(1024, 1048576)
  .default(262144)
  .describe('Upper bound on captured stdout plus stderr bytes (1024-1048576); output beyond it is truncated');
const ASYNC = z
  .boolean()
  .default(false)
  .describe('Return an operationId at once instead of waiting; follow it with operation_status, operation_wait or operation_cancel');
const WAIT_MS = int(0, 5000).default(100).describe('Milliseconds to wait for new output before returning (0-5000)');

export const execRun = defineTool({
  name: 'exec_run',
  domain,
  badges: ['destructive', 'openWorld'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: async (args, ctx) => {
    const ws = ctx.workspace;
    if (args.privileged) {
      // Everything that can refuse the call is checked before a request is filed or a grant spent.
      if (args.async) throw new ServiceError('INVALID_ARGUMENT', 'async: privileged commands run synchronously (their grant is single-use); leave async out', { field: 'async' });
      const cwd = await ctx.services.commands.privilegedCwd(ws, args.cwd, ctx.signal);
      ctx.services.approvals.consume(ApprovalService.privilegedCommand(ws, args.command, cwd), args.approvalGrantToken, ctx.principal, ctx.actor, `a privileged command (in ${JSON.stringify(cwd)})`);
      return { workspaceId: ws, privileged: true, cwd, ...(await ctx.services.commands.runPrivileged(ws, args.command, cwd, args.timeoutMs, args.maxOutputBytes, ctx.signal)) };
    }
    if (args.approvalGrantToken) throw new ServiceError('INVALID_ARGUMENT', 'approvalGrantToken: only meaningful with privileged true', { field: 'approvalGrantToken' });
    if (args.async) return ctx.services.commands.startOperation(ws, 'exec_run', args.command, args.cwd, args.timeoutMs, ctx.signal);
    const r = await ctx.services.workspaces.exec(ws, { command: args.command, cwd: args.cwd, timeoutMs: args.timeoutMs, maxOutputBytes: args.maxOutputBytes }, streamTo(ctx.output), ctx.signal);
    // The output stays the daemon's bytes on its way to the wire (core/raw-text.ts).
    return withBackgroundNote(withFields({ workspaceId: ws }, r));
  },
  description:
    'Run one non-interactive shell command in the workspace as the non-root user and return its exit code and bounded output (time limit up to 300000 ms). ' +
    'Set async for long commands (then poll the returned operation); use tasks_run for runs longer than 5 minutes or with dependencies, and shell_open for interactive programs. ' +
    'When the command returns, whatever it left running (cmd &, nohup, setsid) is ended and the result says how many (backgroundEnded, backgroundNote): start a dev server or other long-running process with tasks_run, which keeps it running. ' +
    'privileged runs need an approvalGrantToken from the approval flow; calling without one explains how to obtain it.',
  input: {
    command: COMMAND,
    cwd: PATH.default('.').describe('Workspace-relative working directory'),
    timeoutMs: TIMEOUT_MS,
    maxOutputBytes: MAX_OUTPUT_BYTES,
    privileged: z.boolean().default(false).describe('Run with elevated privileges; needs approvalGrantToken'),
    approvalGrantToken: str(1, 128).optional().describe('Grant from the approval flow that authorizes one privileged run'),
    async: ASYNC,
  },
});

export const bash = defineTool({
  name: 'bash',
  domain,
  badges: ['destructive', 'openWorld'],
  tracking: '#5 commands',
  run: async (args, ctx) => {
    if (args.target === 'toolbox') {
      if (args.async) throw new ServiceError('INVALID_ARGUMENT', 'async: the toolbox target runs synchronously (it is disposable)', { field: 'async' });
      return { target: 'toolbox', ...(await ctx.services.commands.runToolbox(args.command, args.timeoutMs, args.maxOutputBytes, ctx.signal)) };
    }
    const ws = ctx.workspaceId(args.workspaceId);
    if (args.async) return ctx.services.commands.startOperation(ws, 'bash', args.command, args.cwd, args.timeoutMs, ctx.signal);
    const r = await ctx.services.workspaces.exec(ws, { command: args.command, cwd: args.cwd, timeoutMs: args.timeoutMs, maxOutputBytes: args.maxOutputBytes }, streamTo(ctx.output), ctx.signal);
    return withBackgroundNote(withFields({ target: 'workspace', workspaceId: ws }, r));
  },
  description:
    'Run a bash command. target workspace (default) behaves like exec_run in the workspace; target toolbox runs in a disposable container with no network, checkout, secrets or workspace, where the owner-bound managed packages are available (exists only when the operator enables packages). ' +
    'No privileged mode: use exec_run with its approval flow. With async the result is an operation handle for operation_status, operation_wait and operation_cancel.',
  input: {
    workspaceId: WSID.optional().describe('Workspace for target workspace; not used by target toolbox'),
    command: COMMAND,
    target: z.enum(['workspace', 'toolbox']).default('workspace').describe('workspace: run in the workspace; toolbox: run in a disposable, network-less packages container'),
    cwd: PATH.default('.').describe('Workspace-relative working directory (target workspace only)'),
    timeoutMs: TIMEOUT_MS,
    maxOutputBytes: MAX_OUTPUT_BYTES,
    async: ASYNC,
  },
  check: (a) =>
    a.target === 'toolbox' && a.cwd !== '.'
      ? { field: 'cwd', message: 'cwd applies to target workspace only; the toolbox target has no checkout' }
      : undefined,
});

export const shellOpen = defineTool({
  name: 'shell_open',
  domain,
  badges: ['idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.openTerminal(ctx.workspace, 'shell', a.cwd),
  idempotency: 'key',
  description:
    'Open an interactive shell in the workspace and return its shellId; drive it with shell_io and end it with shell_close. ' +
    'Use it for programs that need input or keep state between commands; for one-off commands use exec_run. The same idempotencyKey with the same input replays the first result.',
  input: {
    cwd: PATH.default('.').describe('Workspace-relative starting directory'),
    idempotencyKey: IDEM,
  },
});

export const shellIo = defineTool({
  name: 'shell_io',
  domain,
  badges: ['destructive', 'openWorld'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.terminalIo(ctx.workspace, 'shell', a.shellId, a.input, a.cursor, a.waitMs, ctx.signal),
  description:
    'Send input to an open shell and/or poll its output: returns the output produced since cursor, waiting up to waitMs (at most 5000) for more, plus the next cursor. ' +
    'Omit input to only poll; include a trailing newline to submit a line. Input is at most 65536 characters per call.',
  input: {
    shellId: SHID,
    input: z.string().max(65536).optional().describe('Text to write to the shell stdin (include "\\n" to submit a line)'),
    cursor: CUR.optional().describe('Cursor from the previous shell_io; output after it is returned. Omit to start from the oldest retained output.'),
    waitMs: WAIT_MS,
  },
});

export const shellClose = defineTool({
  name: 'shell_close',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.closeTerminal(ctx.workspace, 'shell', a.shellId),
  description: 'Close an interactive shell and end its processes. Closing an already closed shell succeeds.',
  input: {
    shellId: SHID,
  },
});

export const operationStatus = defineTool({
  name: 'operation_status',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#5 commands',
  run: (a, ctx) => ctx.services.commands.operationStatus(a.operationId, a.cursor, { principal: ctx.principal, grant: ctx.caller }),
  description:
    'State of an asynchronous operation (from exec_run or bash with async) and its output since cursor; returns at once. ' +
    'To block until it finishes use operation_wait.',
  input: {
    operationId: OPID,
    cursor: CUR.optional().describe('Cursor from the previous operation_status; output after it is returned'),
  },
});

export const operationCancel = defineTool({
  name: 'operation_cancel',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking: '#5 commands',
  run: (a, ctx) => ctx.services.commands.operationCancel(a.operationId, { principal: ctx.principal, grant: ctx.caller }),
  description: 'Cancel a running asynchronous operation and kill its processes; effects already made are not rolled back. Cancelling a finished operation changes nothing.',
  input: {
    operationId: OPID,
  },
});

export const operationWait = defineTool({
  name: 'operation_wait',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#5 commands',
  run: (a, ctx) => ctx.services.commands.operationWait(a.operationId, a.timeoutMs, ctx.signal, ctx.progress, { principal: ctx.principal, grant: ctx.caller }),
  description:
    'Wait up to timeoutMs (100-300000) for an asynchronous operation to finish and return its state; a timeout is not an error, the operation keeps running. ' +
    'Use operation_status for an immediate check or to page through output.',
  input: {
    operationId: OPID,
    timeoutMs: int(100, 300000).default(60000).describe('Milliseconds to wait at most (100-300000)'),
  },
});

export const commandsAndShells = [execRun, bash, shellOpen, shellIo, shellClose, operationStatus, operationCancel, operationWait];

// Spec section "Sessions and tasks".

export const sessionsList = defineTool({
  name: 'sessions_list',
  domain: sessionsDomain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.listSessions(ctx.workspace, a.cursor, a.limit),
  description: 'List the named coding sessions of a workspace (id, name, state), a page at a time with cursors.',
  input: {
    cursor: CUR.optional(),
    limit: int(1, 500).default(100).describe('Page size (1-500)'),
  },
});

export const sessionsOpen = defineTool({
  name: 'sessions_open',
  domain: sessionsDomain,
  badges: ['idempotent'],
  runsCommands: true,
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.openTerminal(ctx.workspace, 'session', a.cwd, a.name),
  idempotency: 'key',
  description:
    'Open a named, long-lived coding session (a persistent interactive terminal) in the workspace and return its sessionId; drive it with sessions_io and end it with sessions_close. ' +
    'Find sessions again by name with sessions_list. The same idempotencyKey with the same input replays the first result.',
  input: {
    name: name(1, 80).describe('Session name: 1-80 characters of A-Z a-z 0-9 . _ -'),
    cwd: PATH.default('.').describe('Workspace-relative starting directory'),
    idempotencyKey: IDEM,
  },
});

export const sessionsIo = defineTool({
  name: 'sessions_io',
  domain: sessionsDomain,
  badges: ['destructive', 'openWorld'],
  runsCommands: true,
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.terminalIo(ctx.workspace, 'session', a.sessionId, a.input, a.cursor, a.waitMs, ctx.signal),
  description:
    'Send input to a coding session and/or poll its output: returns the output produced since cursor, waiting up to waitMs (at most 5000) for more, plus the next cursor. ' +
    'Omit input to only poll. Input is at most 65536 characters per call.',
  input: {
    sessionId: SESSID,
    input: z.string().max(65536).optional().describe('Text to write to the session stdin (include "\\n" to submit a line)'),
    cursor: CUR.optional().describe('Cursor from the previous sessions_io; output after it is returned. Omit to start from the oldest retained output.'),
    waitMs: int(0, 5000).default(100).describe('Milliseconds to wait for new output before returning (0-5000)'),
  },
});

export const sessionsClose = defineTool({
  name: 'sessions_close',
  domain: sessionsDomain,
  badges: ['destructive', 'idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.closeTerminal(ctx.workspace, 'session', a.sessionId),
  description: 'Close a coding session and end its processes. Closing an already closed session succeeds.',
  input: {
    sessionId: SESSID,
  },
});

export const tasksList = defineTool({
  name: 'tasks_list',
  domain: sessionsDomain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.listTasks(ctx.workspace, a.cursor, a.limit),
  description: 'List the background tasks of a workspace (id, command, state), a page at a time with cursors. Use tasks_status for one task\'s output.',
  input: {
    cursor: CUR.optional(),
    limit: int(1, 500).default(100).describe('Page size (1-500)'),
  },
});

export const tasksRun = defineTool({
  name: 'tasks_run',
  domain: sessionsDomain,
  badges: ['destructive', 'idempotent', 'openWorld'],
  runsCommands: true,
  tracking: '#5 commands',
  workspace: 'optional',
  run: async (args, ctx) => {
    const r = await ctx.services.commands.runTask(ctx.workspace, { command: args.command, cwd: args.cwd, timeoutMs: args.timeoutMs, dependsOn: args.dependsOn }, ctx.signal);
    // A milestone for clients that asked for MCP log messages (logging/setLevel).
    ctx.log('info', `task ${String(r.taskId)} ${r.state === 'running' ? 'started' : `is ${String(r.state)}`}${args.dependsOn.length ? ` (depends on ${args.dependsOn.join(', ')})` : ''}`, { taskId: r.taskId, state: r.state });
    return r;
  },
  idempotency: 'key',
  description:
    'Start a background command in the workspace that may run up to 24 hours (timeoutMs up to 86400000, default 15 minutes), optionally after other tasks (dependsOn); returns a taskId at once. ' +
    'Follow it with tasks_status, stop it with tasks_cancel, see the order with tasks_graph. For commands under 5 minutes exec_run is simpler. The same idempotencyKey with the same input replays the first result.',
  input: {
    command: str(1, 32768).describe('Shell command line to run (1-32768 characters)'),
    cwd: PATH.default('.').describe('Workspace-relative working directory'),
    idempotencyKey: IDEM,
    timeoutMs: int(100, 86400000).default(900000).describe('Time limit in milliseconds (100-86400000); the task is killed when it passes'),
    dependsOn: z
      .array(TASKID)
      .max(100)
      .default([])
      .describe('Task ids (at most 100) of this workspace that must finish before this task starts'),
  },
});

export const tasksStatus = defineTool({
  name: 'tasks_status',
  domain: sessionsDomain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.taskStatus(ctx.workspace, a.taskId, a.cursor),
  description: 'State of one task and its next output chunk after cursor; call again with the returned cursor to page through the output.',
  input: {
    taskId: TASKID,
    cursor: CUR.optional().describe('Cursor from the previous tasks_status; the chunk after it is returned. Omit for the first chunk.'),
  },
});

export const tasksCancel = defineTool({
  name: 'tasks_cancel',
  domain: sessionsDomain,
  badges: ['destructive', 'idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.taskCancel(ctx.workspace, a.taskId),
  description: "Cancel a task by terminating its process group; effects it already made (files written, packages installed) are not rolled back. Cancelling a finished task changes nothing.",
  input: {
    taskId: TASKID,
  },
});

export const tasksGraph = defineTool({
  name: 'tasks_graph',
  domain: sessionsDomain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.graph(ctx.workspace),
  description: 'The dependency graph of the workspace\'s tasks (tasks and their dependsOn edges), to see what runs after what and what is blocked.',
  input: {
  },
});

export const sessionsAndTasks = [
  sessionsList,
  sessionsOpen,
  sessionsIo,
  sessionsClose,
  tasksList,
  tasksRun,
  tasksStatus,
  tasksCancel,
  tasksGraph,
];
