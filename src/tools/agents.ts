/** Spec section "Coding subagents" (6 tools). */
import { defineTool } from './define.js';
import { AGENTID, IDEM, PROFILEID, int, str, z } from './types.js';
import { SPAWN_BUDGET_DEFAULTS } from '../services/agents/index.js';

const domain = 'Coding subagents';

/** The nine agent status values. */
export const AGENT_STATUS = z.enum([
  'SPAWNING',
  'RUNNING',
  'CANCELLING',
  'SUCCEEDED',
  'FAILED',
  'CANCELLED',
  'TIMED_OUT',
  'LIMIT_EXCEEDED',
  'INTERRUPTED',
]);

/**
 * A budget a child's carve takes from its parent: published exactly as `.default(d)` publishes it
 * (the same JSON Schema, `default` included), but left undefined when omitted, so the service can
 * tell an omitted budget from an explicit one.
 */
function carvedBudget(schema: ReturnType<typeof int>, field: keyof typeof SPAWN_BUDGET_DEFAULTS) {
  return schema.optional().meta({ default: SPAWN_BUDGET_DEFAULTS[field] });
}

export const agentSpawn = defineTool({
  name: 'agent_spawn',
  domain,
  badges: ['destructive', 'idempotent', 'openWorld'],
  tracking: 'coding subagents',
  workspace: 'optional',
  idempotency: 'key',
  description:
    'Start a budgeted coding subagent in its own isolated container on an active model profile (see model_profile_list; a profile saved over MCP stays disabled until the owner activates it on the dashboard). ' +
    'The agent may call only the proxyOperations tools, expected to lie within the profile\'s maxProxyOperations, and stops at its ttl, token, cost or output budget. Follow it with agent_status, agent_logs and agent_message. ' +
    'Under a parent, an omitted token or cost budget defaults to the smaller of its default and what the parent has left (the result\'s budgetsDefaulted names each one lowered); an explicit value above what the parent has left is refused. ' +
    'Fails with UNAVAILABLE when the model gateway is unreachable. The same idempotencyKey with the same input replays the first result.',
  input: {
    prompt: z.string().min(1).describe('The task for the agent'),
    idempotencyKey: IDEM,
    profileId: PROFILEID.describe('An active model profile; its current revision and credential stay in force until the agent ends'),
    parentAgentId: AGENTID.optional().describe('Parent agent: cancelling the parent cascades to this agent'),
    proxyOperations: z
      .array(str(1, 64))
      .max(200)
      .describe('Tool names the agent may proxy, e.g. files_read, grep_search (at most 200; within the profile\'s maxProxyOperations)'),
    ttlSeconds: int(30, 86400).default(900).describe('Wall-clock lifetime in seconds (30-86400)'),
    maxOutputBytes: int(1024, 10485760).default(262144).describe('Cap on the agent\'s output bytes (1024-10485760)'),
    // The carved budgets publish the spec's default, but an omitted one reaches the service as
    // undefined: under a parent it defaults to at most what the parent has left (issue #42 item 10).
    maxInputTokens: carvedBudget(int(1, 2000000), 'maxInputTokens').describe('Input-token budget (1-2000000)'),
    maxOutputTokens: carvedBudget(int(1, 2000000), 'maxOutputTokens').describe('Output-token budget (1-2000000)'),
    maxCostMicros: carvedBudget(int(0, 1000000000), 'maxCostMicros').describe('Estimated cost budget in micro-USD (0-1000000000; default 10000000 = 10 USD)'),
    repositoryContext: z
      .enum(['all', 'profile_a', 'profile_b', 'profile_c', 'profile_d', 'none'])
      .optional()
      .describe('Which client family\'s repository instruction files go with the task; omitted behaves as profile_a; none sends the task alone'),
  },
  run: async (args, ctx) => {
    const r = await ctx.services.agents.spawn(args, { workspace: ctx.workspace, actor: ctx.actor, principal: ctx.principal, owner: ctx.owner, grant: ctx.caller });
    // A milestone for clients that asked for MCP log messages (logging/setLevel).
    ctx.log('info', `agent ${String(r.agentId)} ${String(r.status).toLowerCase()} on profile ${args.profileId}`, { agentId: r.agentId, status: r.status, profileId: args.profileId });
    return r;
  },
});

export const agentStatus = defineTool({
  name: 'agent_status',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: 'coding subagents',
  workspace: 'optional',
  description:
    'State of one agent: status, budgets used and remaining, and a terminal summary once it ended. ' +
    'Name it by agentId, or by the idempotencyKey you passed to agent_spawn (useful when the spawn result was lost). Use agent_logs for its output and agent_list to find agents.',
  input: {
    agentId: AGENTID.optional(),
    idempotencyKey: IDEM.optional().describe('The idempotencyKey of the agent_spawn call, to find the agent it started'),
  },
  run: (a, ctx) => ctx.services.agents.status(a, { workspace: ctx.workspace, actor: ctx.actor, principal: ctx.principal, owner: ctx.owner, grant: ctx.caller }),
});

export const agentLogs = defineTool({
  name: 'agent_logs',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: 'coding subagents',
  workspace: 'optional',
  description:
    'Read an agent\'s output log a page at a time: pass the returned cursor to continue, and poll it while the agent runs. At most limitBytes per call (1024-262144).',
  input: {
    agentId: AGENTID,
    cursor: z
      .string()
      .regex(/^(0|[1-9][0-9]{0,15})$/)
      .max(16)
      .optional()
      .describe('Decimal cursor string from a previous page ("0" = start of the log). Omit for the start.'),
    limitBytes: int(1024, 262144).default(65536).describe('Most bytes to return (1024-262144)'),
  },
  run: (a, ctx) => ctx.services.agents.logs(a, { workspace: ctx.workspace, actor: ctx.actor, principal: ctx.principal, owner: ctx.owner, grant: ctx.caller }),
});

export const agentMessage = defineTool({
  name: 'agent_message',
  domain,
  badges: ['destructive', 'idempotent', 'openWorld'],
  tracking: 'coding subagents',
  workspace: 'optional',
  idempotency: 'key',
  description:
    'Send a message to a running agent: mode steer redirects it at the next turn boundary (the tool call in flight finishes, the rest of that batch is skipped); mode followUp is queued and delivered when the agent would otherwise end, continuing it within its remaining budgets. A message to an ended or cancelling agent is refused with FAILED_PRECONDITION. ' +
    'The same idempotencyKey with the same input replays the first result.',
  input: {
    agentId: AGENTID,
    idempotencyKey: IDEM,
    mode: z.enum(['steer', 'followUp']).describe('steer: change course now; followUp: deliver when the current turn ends'),
    message: z.string().min(1),
  },
  run: (a, ctx) => ctx.services.agents.message(a, { workspace: ctx.workspace, actor: ctx.actor, principal: ctx.principal, owner: ctx.owner, grant: ctx.caller }),
});

export const agentCancel = defineTool({
  name: 'agent_cancel',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking: 'coding subagents',
  workspace: 'optional',
  description:
    'Cancel an agent and, in cascade, all its child agents. Repeating the call on a cancelled or ended agent changes nothing.',
  input: {
    agentId: AGENTID,
    reason: z.string().max(2000).optional().describe('Why the agent is cancelled (kept with the agent, max 2000 characters)'),
  },
  run: async (args, ctx) => {
    const r = await ctx.services.agents.cancel(args, { workspace: ctx.workspace, actor: ctx.actor, principal: ctx.principal, owner: ctx.owner, grant: ctx.caller });
    ctx.log('info', `agent ${args.agentId} cancel requested`, { agentId: args.agentId, cancelled: r.cancelled });
    return r;
  },
});

export const agentList = defineTool({
  name: 'agent_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: 'coding subagents',
  workspace: 'optional',
  description:
    'List your agents, optionally only the children of parentAgentId or those with one status, a page at a time with cursors. Use agent_status for one agent\'s details.',
  input: {
    parentAgentId: AGENTID.optional().describe('Only the direct children of this agent'),
    status: AGENT_STATUS.optional().describe('Only agents in this status'),
    cursor: z
      .string()
      .regex(/^[1-9][0-9]{0,15}$/)
      .max(16)
      .optional()
      .describe('Cursor from a previous page: decimal positive integer text. Omit for the first page.'),
    limit: int(1, 100).default(50).describe('Page size (1-100)'),
  },
  run: (a, ctx) => ctx.services.agents.list(a, { workspace: ctx.workspace, actor: ctx.actor, principal: ctx.principal, owner: ctx.owner, grant: ctx.caller }),
});

export const tools = [agentSpawn, agentStatus, agentLogs, agentMessage, agentCancel, agentList];
