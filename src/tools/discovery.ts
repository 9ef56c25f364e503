/**
 * Beyond the spec's 107 tools (issue #45 item 2): the dynamic mode's discovery tools, toolset
 * "discovery". A connection that asks for the dynamic mode (X-MCP-Dynamic-Toolsets: true, or a
 * token made with --dynamic-toolsets) starts with the core toolsets and these two; toolsets_enable
 * adds a toolset to that connection's list and sends notifications/tools/list_changed. They never
 * reach beyond the caller's access. The state lives in the MCP transport (src/mcp/dynamic-toolsets.ts);
 * docs/access.md "Dynamic toolsets".
 */
import { defineTool } from './define.js';
import { z } from './types.js';
import { ServiceError } from '../core/errors.js';
import { CORE_TOOLS, CORE_TOOLSETS, DISCOVERY_TOOLSET, TOOLSET_SUMMARIES, parseToolsets, type ToolsetSession } from '../core/toolsets.js';

const domain = 'Tool discovery (beyond the spec)';
const tracking = '#45 tool discovery' as const;

/** The session's dynamic mode, or the refusal that says how to ask for it. */
function session(ctx: { toolsets?: ToolsetSession }): ToolsetSession {
  if (ctx.toolsets) return ctx.toolsets;
  throw new ServiceError('FAILED_PRECONDITION', 'toolsets: only an MCP connection has a tool list to change', { rule: 'MCP connection' });
}

const OFF =
  'dynamic mode is off for this connection, so every tool your access allows is already listed; to start small, connect with the header X-MCP-Dynamic-Toolsets: true or a token made with `atelier token create --dynamic-toolsets`';

export const toolsetsList = defineTool({
  name: 'toolsets_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description: 'The toolsets your access allows, with a summary, their tools and how many of them this connection lists (mode dynamic); mode static says why every tool is listed instead.',
  input: {},
  run: (_a, ctx) => {
    const s = session(ctx);
    const enabled = new Set(s.enabled());
    const listedOf = (t: string, tools: string[]): number => (s.mode !== 'dynamic' || enabled.has(t) ? tools.length : tools.filter((n) => CORE_TOOLS.has(n)).length);
    return {
      mode: s.mode,
      ...(s.mode === 'static' ? { reason: s.reason } : s.mode === 'off' ? { reason: OFF } : {}),
      toolsets: s.available().map(({ toolset, tools }) => {
        const listedTools = listedOf(toolset, tools);
        return { name: toolset, summary: TOOLSET_SUMMARIES[toolset] ?? '', listed: listedTools === tools.length, listedTools, tools };
      }),
    };
  },
});

const ENABLE_LIST = Object.keys(TOOLSET_SUMMARIES)
  .filter((t) => !CORE_TOOLSETS.includes(t) && t !== DISCOVERY_TOOLSET)
  .map((t) => `${t} (${TOOLSET_SUMMARIES[t]})`)
  .join('; ');
const CORE_LIST = CORE_TOOLSETS.join(', ');

export const toolsetsEnable = defineTool({
  name: 'toolsets_enable',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description: `Add toolsets to this connection's tool list; the list change follows, then list tools again. Toolsets: ${ENABLE_LIST}; and ${CORE_LIST}, for the rest of their tools (shells, worktrees, merge, rebase, identity, lease renewal…).`,
  input: {
    toolsets: z.array(z.string().min(1).max(40)).min(1).max(20).describe('Toolset, alias or preset names'),
  },
  run: async (a, ctx) => {
    const s = session(ctx);
    if (s.mode === 'off') throw new ServiceError('FAILED_PRECONDITION', `toolsets: ${OFF}`, { field: 'toolsets', rule: 'dynamic mode' });
    if (s.mode === 'static') throw new ServiceError('FAILED_PRECONDITION', `toolsets: every tool your access allows is already listed: ${s.reason}`, { field: 'toolsets', rule: 'list changes reach the client' });
    const wanted = parseToolsets(a.toolsets, 'toolsets') ?? Object.keys(TOOLSET_SUMMARIES);
    const allowed = new Map(s.available().map((x) => [x.toolset, x.tools]));
    const beyond = wanted.filter((t) => t !== DISCOVERY_TOOLSET && !allowed.has(t));
    if (beyond.length)
      throw new ServiceError('PERMISSION_DENIED', `toolsets: ${beyond.join(', ')} ${beyond.length === 1 ? 'is' : 'are'} beyond this connection's access (allowed: ${[...allowed.keys()].join(', ') || 'none'})`, {
        field: 'toolsets',
        rule: 'toolset not granted',
      });
    const fresh = wanted.filter((t) => allowed.has(t));
    const { added, notified } = await s.enable(fresh);
    return {
      enabled: s.enabled(),
      added,
      tools: added.flatMap((t) => (allowed.get(t) ?? []).filter((n) => !CORE_TOOLS.has(n))),
      listChanged: notified ? 'sent' : 'unchanged',
    };
  },
});

export const tools = [toolsetsList, toolsetsEnable];
