/**
 * Skills as MCP prompts (issue #32 item 4): one prompt per skill of the roster of the caller's
 * active workspace (the owner and built-in skills when there is none), named as the skill, which
 * clients such as Claude Code offer as slash commands. prompts/get answers the skill's SKILL.md
 * (read as skills_read reads it) after a header naming its source, location and SHA-256, what its
 * other files and scripts are and how to reach them, and, for a workspace or repository skill,
 * that its text comes from the checkout; an optional `task` argument is appended. Decisions:
 * docs/extensions.md, "Skills over MCP".
 */
import type { Server, ServerContext } from '@modelcontextprotocol/server';
import { ServiceError } from '../core/errors.js';
import type { Skill } from '../services/extensions/index.js';
import { loadSkill, skillFileUri, skillRoot } from './skills-ext.js';
import { META, activeRoster, cacheFields, mayUse, page, requireTool, rpcError, type SurfaceDeps } from './surface.js';

/** The longest `task` argument (as skill_suggest's prompt). */
export const MAX_TASK_CHARS = 65_536;

const TASK_ARGUMENT = { name: 'task', description: 'What to do with this skill (optional): appended after its instructions', required: false };

function promptOf(skill: Skill): Record<string, unknown> {
  return {
    name: skill.name,
    title: `${skill.name} (${skill.source} skill)`,
    description: skill.meta.description ?? '',
    arguments: [TASK_ARGUMENT],
    _meta: { [`${META}skill`]: { source: skill.source, location: skill.location, sha256: skill.sha256 } },
  };
}

/** The prompt's text: what the skill is and where it comes from, then its SKILL.md, then the task. */
export function promptText(skill: Skill, markdown: string, workspaceId: string | null, task: string | undefined): string {
  const q = (v: string) => JSON.stringify(v);
  const lines = [`Use the skill ${q(skill.name)}: the ${skill.source} skill at ${q(skill.location)}${workspaceId && (skill.source === 'workspace' || skill.source === 'repository') ? ` in workspace ${workspaceId}` : ''} (SHA-256 ${skill.sha256}).`];
  if (skill.source === 'workspace' || skill.source === 'repository')
    lines.push('Its text comes from the workspace checkout, not from the owner: treat it as the repository\'s instructions. Its scripts run only with the owner\'s approval (skills_run).');
  const others = skill.files.map((f) => f.path).filter((p) => p !== 'SKILL.md').sort();
  if (others.length) {
    const root = skillRoot(skill.source, workspaceId, skill.name);
    lines.push(`Its other files (read them with skills_read, or as resources): ${others.slice(0, 50).map((p) => `${p} <${skillFileUri(root, p)}>`).join(', ')}${others.length > 50 ? `, and ${others.length - 50} more` : ''}.`);
  }
  if (skill.scripts.length) lines.push(`Its scripts (run one with skills_run, name ${q(skill.name)}, source ${q(skill.source)}): ${skill.scripts.join(', ')}.`);
  lines.push('', '=== SKILL.md ===', markdown.endsWith('\n') ? markdown.slice(0, -1) : markdown, '=== end of SKILL.md ===');
  if (task !== undefined && task.trim() !== '') lines.push('', `Task: ${task}`);
  return lines.join('\n');
}

export function registerPrompts(server: Server, deps: SurfaceDeps): void {
  server.setRequestHandler('prompts/list', async (req, ctx: ServerContext) => {
    const caller = deps.caller(ctx);
    try {
      if (!mayUse(deps, caller, 'skills_list')) return { prompts: [], ...cacheFields(server, 0) };
      const roster = await activeRoster(deps.app, caller.principal, ctx.mcpReq.signal);
      const p = page(deps.app, 'prompts_list', roster.skills.map(promptOf), roster.workspaceId, req.params?.cursor);
      return { prompts: p.items as never, ...(p.nextCursor ? { nextCursor: p.nextCursor } : {}), ...cacheFields(server, 0) };
    } catch (e) {
      throw rpcError(deps.app, e);
    }
  });
  server.setRequestHandler('prompts/get', async (req, ctx: ServerContext) => {
    const caller = deps.caller(ctx);
    const name = req.params.name;
    try {
      requireTool(deps, caller, 'skills_read', 'prompts/get', name.slice(0, 200));
      const args = req.params.arguments ?? {};
      for (const k of Object.keys(args)) if (k !== 'task') throw new ServiceError('INVALID_ARGUMENT', `arguments.${k.slice(0, 60)}: unknown argument; a skill prompt takes only "task"`, { field: `arguments.${k.slice(0, 60)}`, rule: 'known argument' });
      const task = args.task;
      if (task !== undefined && task.length > MAX_TASK_CHARS) throw new ServiceError('INVALID_ARGUMENT', `arguments.task: at most ${MAX_TASK_CHARS} characters`, { field: 'arguments.task', rule: `at most ${MAX_TASK_CHARS} characters` });
      const roster = await activeRoster(deps.app, caller.principal, ctx.mcpReq.signal);
      const listed = roster.skills.find((s) => s.name === name);
      if (!listed)
        throw new ServiceError(
          'NOT_FOUND',
          `name: no skill ${JSON.stringify(name.slice(0, 200))} in ${roster.workspaceId ? `the roster of the active workspace ${roster.workspaceId}` : 'the owner and built-in skills (there is no active workspace)'}; prompts/list names them`,
          { field: 'name' },
        );
      const { skill, contents } = await loadSkill(deps.app, listed.source, roster.workspaceId, listed.name, ctx.mcpReq.signal);
      const markdown = contents.get('SKILL.md')!.toString('utf8');
      return {
        description: skill.meta.description ?? '',
        messages: [{ role: 'user' as const, content: { type: 'text' as const, text: promptText(skill, markdown, roster.workspaceId, task) } }],
        _meta: { [`${META}skill`]: { source: skill.source, location: skill.location, sha256: skill.sha256 } },
      };
    } catch (e) {
      throw rpcError(deps.app, e);
    }
  });
}
