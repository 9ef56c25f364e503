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
    'Start a budgeted coding subagent in its own container on an active model profile (model_profile_list). ' +
    'It may call only proxyOperations (tool names, e.g. files_read; within the profile\'s maxProxyOperations) and stops at its ttl, token, cost or output budget. ' +
    'Under parentAgentId an omitted token or cost budget is capped at what the parent has left (budgetsDefaulted lists them); an explicit larger one is refused. UNAVAILABLE when the model gateway is unreachable.',
  input: {
    prompt: z.string().min(1),
    idempotencyKey: IDEM,
    profileId: PROFILEID,
    parentAgentId: AGENTID.optional(),
    proxyOperations: z.array(str(1, 64)).max(200),
    ttlSeconds: int(30, 86400).default(900),
    maxOutputBytes: int(1024, 10485760).default(262144),
    // The carved budgets publish the spec's default, but an omitted one reaches the service as
    // undefined: under a parent it defaults to at most what the parent has left (issue #42 item 10).
    maxInputTokens: carvedBudget(int(1, 2000000), 'maxInputTokens'),
    maxOutputTokens: carvedBudget(int(1, 2000000), 'maxOutputTokens'),
    maxCostMicros: carvedBudget(int(0, 1000000000), 'maxCostMicros'),
    repositoryContext: z
      .enum(['all', 'profile_a', 'profile_b', 'profile_c', 'profile_d', 'none'])
      .optional()
      .describe('Client family whose repository instruction files join the prompt; omitted = profile_a'),
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
    'One agent\'s status, budgets used and left, and its summary once ended. Name it by agentId or by its agent_spawn idempotencyKey (if the spawn result was lost).',
  input: {
    agentId: AGENTID.optional(),
    idempotencyKey: IDEM.optional(),
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
    'Read an agent\'s output log, limitBytes a page; poll with the returned cursor while it runs.',
  input: {
    agentId: AGENTID,
    cursor: z
      .string()
      .regex(/^(0|[1-9][0-9]{0,15})$/)
      .max(16)
      .optional(),
    limitBytes: int(1024, 262144).default(65536),
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
    'Message a running agent. steer: redirects it at the next turn boundary (after the tool call in flight; the rest of its batch is skipped). followUp: delivered when it would end, continuing it within its budgets. Ended or cancelling agent: FAILED_PRECONDITION.',
  input: {
    agentId: AGENTID,
    idempotencyKey: IDEM,
    mode: z.enum(['steer', 'followUp']),
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
    'Cancel an agent and, in cascade, its child agents. On an ended agent it changes nothing.',
  input: {
    agentId: AGENTID,
    reason: z.string().max(2000).optional(),
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
    'List your agents, optionally only parentAgentId\'s direct children or one status.',
  input: {
    parentAgentId: AGENTID.optional(),
    status: AGENT_STATUS.optional(),
    cursor: z
      .string()
      .regex(/^[1-9][0-9]{0,15}$/)
      .max(16)
      .optional(),
    limit: int(1, 100).default(50),
  },
  run: (a, ctx) => ctx.services.agents.list(a, { workspace: ctx.workspace, actor: ctx.actor, principal: ctx.principal, owner: ctx.owner, grant: ctx.caller }),
});

export const tools = [agentSpawn, agentStatus, agentLogs, agentMessage, agentCancel, agentList];
