/** Spec section "Sessions and tasks" (9 tools). */
import { defineTool } from './define.js';
import { CUR, IDEM, PATH, SESSID, TASKID, int, name, str, z } from './types.js';

const domain = 'Sessions and tasks';

export const sessionsList = defineTool({
  name: 'sessions_list',
  domain,
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
  domain,
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
  domain,
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
  domain,
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
  domain,
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
  domain,
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
  domain,
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
  domain,
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
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#5 commands',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.commands.graph(ctx.workspace),
  description: 'The dependency graph of the workspace\'s tasks (tasks and their dependsOn edges), to see what runs after what and what is blocked.',
  input: {
  },
});

export const tools = [
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
