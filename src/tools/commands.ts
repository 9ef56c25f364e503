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

const COMMAND = str(1, 32768);
const TIMEOUT_MS = int(100, 300000).default(60000);
const MAX_OUTPUT_BYTES = int(1024, 1048576).default(262144);
const ASYNC = z.boolean().default(false);
const WAIT_MS = int(0, 5000).default(100);

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
    'Run a non-interactive shell command (non-root): exitCode, stdout, stderr (middle cut past maxOutputBytes). async: an operationId for operation_wait. Processes left running are ended: servers and runs over 5 min: tasks_run; interactive: shell_open. privileged (not async) needs owner approval: call without approvalGrantToken to request it.',
  input: {
    command: COMMAND,
    cwd: PATH.default('.'),
    timeoutMs: TIMEOUT_MS,
    maxOutputBytes: MAX_OUTPUT_BYTES,
    privileged: z.boolean().default(false),
    approvalGrantToken: str(1, 128).optional(),
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
    'Run bash. target workspace: as exec_run, not privileged. toolbox (managed packages enabled): a disposable container with the owner-bound packages; no network, checkout, secrets, cwd, async.',
  input: {
    workspaceId: WSID.optional(),
    command: COMMAND,
    target: z.enum(['workspace', 'toolbox']).default('workspace'),
    cwd: PATH.default('.'),
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
    'Open an interactive shell (input, state across commands): shellId for shell_io, shell_close. One-off: exec_run.',
  input: {
    cwd: PATH.default('.'),
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
    'Write input (end lines with \\n; omit to poll); returns output after cursor (omitted: oldest kept) within waitMs, and the next cursor.',
  input: {
    shellId: SHID,
    input: z.string().max(65536).optional(),
    cursor: CUR.optional(),
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
  description: 'Close a shell and end its processes; closing a closed shell succeeds.',
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
  description: 'An async operation\'s state and output after cursor, at once. To block: operation_wait.',
  input: {
    operationId: OPID,
    cursor: CUR.optional(),
  },
});

export const operationCancel = defineTool({
  name: 'operation_cancel',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking: '#5 commands',
  run: (a, ctx) => ctx.services.commands.operationCancel(a.operationId, { principal: ctx.principal, grant: ctx.caller }),
  description: 'Cancel an async operation, killing its processes; effects made stay.',
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
  description: 'Wait up to timeoutMs for an async operation to end; returns its state. Timeout is no error; it keeps running.',
  input: {
    operationId: OPID,
    timeoutMs: int(100, 300000).default(60000),
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
  description: 'List the workspace\'s named coding sessions: id, name, state.',
  input: {
    cursor: CUR.optional(),
    limit: int(1, 500).default(100),
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
    'Open a named persistent terminal session: sessionId for sessions_io, sessions_close. Find by name: sessions_list.',
  input: {
    name: name(1, 80),
    cwd: PATH.default('.'),
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
  description: 'As shell_io, for a session: write input, read output after cursor.',
  input: {
    sessionId: SESSID,
    input: z.string().max(65536).optional(),
    cursor: CUR.optional(),
    waitMs: int(0, 5000).default(100),
  },
});

export const sessionsClose = defineTool({
  name: 'sessions_close',
  domain: sessionsDomain,
  badges: ['destructive', 'idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.closeTerminal(ctx.workspace, 'session', a.sessionId),
  description: 'Close a session and end its processes; closing a closed session succeeds.',
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
  description: 'The workspace\'s background tasks: id, command, state.',
  input: {
    cursor: CUR.optional(),
    limit: int(1, 500).default(100),
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
    'Start a background command (servers, up to 24 h) once all dependsOn tasks succeeded (else dependency_failed); returns taskId at once, for tasks_status.',
  input: {
    command: str(1, 32768),
    cwd: PATH.default('.'),
    idempotencyKey: IDEM,
    timeoutMs: int(100, 86400000).default(900000),
    dependsOn: z.array(TASKID).max(100).default([]),
  },
});

export const tasksStatus = defineTool({
  name: 'tasks_status',
  domain: sessionsDomain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.taskStatus(ctx.workspace, a.taskId, a.cursor),
  description: 'A task\'s state and its next output chunk after cursor.',
  input: {
    taskId: TASKID,
    cursor: CUR.optional(),
  },
});

export const tasksCancel = defineTool({
  name: 'tasks_cancel',
  domain: sessionsDomain,
  badges: ['destructive', 'idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.taskCancel(ctx.workspace, a.taskId),
  description: 'Cancel a task, killing its process group; effects made stay.',
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
  description: 'Tasks and their dependsOn edges: what runs after what, what is blocked.',
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
