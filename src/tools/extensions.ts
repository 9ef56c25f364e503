/** Spec section "Repository extensions" (15 tools): skills, hooks, memory notes, deployment targets. */
import { defineTool } from './define.js';
import { CUR, INT, SHA, WSID, int, name, str, z } from './types.js';

const domain = 'Repository extensions';
const tracking = 'repository extensions' as const;
const who = (ctx: { principal: string; actor: import('./context.js').Actor; caller: import('../core/caller.js').CallerGrant }) => ({ principal: ctx.principal, actor: ctx.actor, grant: ctx.caller });

/** Skill names: 1-120 chars of A-Za-z0-9._:- */
const SKILL_NAME = name(1, 120, ':');
const SKILL_SOURCE = z.enum(['built-in', 'owner', 'workspace', 'repository']);

const HOOK_EVENT = z.enum(['on_workspace_open', 'post_checkout', 'pre_commit', 'post_commit', 'manual']);
/** Arrays of hook events; five events exist, so at most five entries. */
const HOOK_EVENTS = z.array(HOOK_EVENT).min(1).max(5);

const TIMEOUT_MS = int(100, 300000).default(60000);
const APPROVAL_GRANT = str(1, 128);

export const skillsList = defineTool({
  name: 'skills_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  run: (a, ctx) => ctx.services.extensions.skills.listTool(ctx.workspace, a, ctx.signal),
  workspace: 'optional',
  description:
    'List the workspace\'s skills: description, scripts, problems, sha256. A name goes to the first of owner, built-in, workspace, repository skills; the rest are shadowed.',
  input: {
    limit: int(1, 100).default(50),
    cursor: CUR.optional(),
    includeShadowed: z.boolean().default(true),
  },
});

export const skillsRead = defineTool({
  name: 'skills_read',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  run: (a, ctx) => ctx.services.extensions.skills.readTool(ctx.workspace, a, ctx.signal),
  workspace: 'optional',
  description:
    'Read a skill: SKILL.md, then each file after a header with size and SHA-256; offset/limit in bytes, continue from nextOffset.',
  input: {
    name: SKILL_NAME,
    source: SKILL_SOURCE.optional(),
    expectedSha256: SHA.optional(),
    offset: INT.default(0),
    limit: int(1, 262144).default(65536),
  },
});

export const skillsRun = defineTool({
  name: 'skills_run',
  domain,
  badges: ['destructive', 'openWorld'],
  runsCommands: true,
  tracking,
  run: (a, ctx) => ctx.services.extensions.skills.runTool(ctx.workspace, a, who(ctx), ctx.signal),
  workspace: 'optional',
  description:
    'Run a file of the skill\'s scripts/ in the workspace sandbox; output as exec_run. expectedContentSha256: the script\'s. Repository and workspace skills need owner approval: without approvalGrantToken, PERMISSION_DENIED with approvalRequestId; retry with the owner\'s grant (single use, same args).',
  input: {
    name: SKILL_NAME,
    source: SKILL_SOURCE.optional(),
    script: name(1, 120),
    args: z.array(z.string().max(4096)).max(1000).default([]),
    timeoutMs: TIMEOUT_MS,
    expectedSha256: SHA.optional(),
    expectedContentSha256: SHA.optional(),
    approvalGrantToken: APPROVAL_GRANT.optional(),
  },
});

export const hooksList = defineTool({
  name: 'hooks_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  run: (a, ctx) => ctx.services.extensions.hooks.listTool(ctx.workspace, a, ctx.signal),
  workspace: 'optional',
  description:
    'List the repository hooks (.atelier/hooks.json), their events, and the manifest SHA-256 for hooks_activate; inactive ones only with includeInactive.',
  input: {
    event: HOOK_EVENT.optional(),
    includeInactive: z.boolean().default(false),
    limit: int(1, 100).default(50),
    cursor: CUR.optional(),
  },
});

export const hooksRun = defineTool({
  name: 'hooks_run',
  domain,
  badges: ['destructive', 'openWorld'],
  runsCommands: true,
  tracking,
  run: (a, ctx) => ctx.services.extensions.hooks.runTool(ctx.workspace, a, who(ctx), ctx.signal),
  workspace: 'optional',
  description:
    'Run one hook of an activated, unchanged manifest now, else FAILED_PRECONDITION; timeoutMs is capped by the hook\'s.',
  input: {
    name: name(1, 120),
    event: HOOK_EVENT.optional(),
    expectedSha256: SHA.optional(),
    expectedManifestSha256: SHA.optional(),
    timeoutMs: TIMEOUT_MS,
  },
});

export const hooksActivate = defineTool({
  name: 'hooks_activate',
  domain,
  badges: ['destructive'],
  runsCommands: true,
  tracking,
  run: (a, ctx) => ctx.services.extensions.hooks.activate(ctx.workspace, a, who(ctx), ctx.signal),
  workspace: 'optional',
  description:
    'Enroll the hook manifest of exactly this SHA-256 so its hooks run on these events, for retentionSeconds (=86400). A changed manifest needs a new activation.',
  input: {
    manifestSha256: SHA,
    events: HOOK_EVENTS,
    retentionSeconds: int(60, 2592000).optional(),
  },
});

export const hooksDeactivate = defineTool({
  name: 'hooks_deactivate',
  domain,
  badges: ['destructive'],
  tracking,
  run: (a, ctx) => ctx.services.extensions.hooks.deactivate(ctx.workspace, a.events, who(ctx)),
  workspace: 'optional',
  description:
    'Withdraw hook activation for the events (all when omitted).',
  input: {
    events: HOOK_EVENTS.optional(),
  },
});

export const deploymentsList = defineTool({
  name: 'deployments_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  run: (a, ctx) => ctx.services.extensions.deployments.listTool(ctx.workspace, ctx.signal),
  workspace: 'optional',
  description:
    'List the repository\'s deployment targets (.atelier/deployments.json): command, hosts, secrets, SHA-256, enrolled or not.',
  input: {},
});

export const deploymentsRun = defineTool({
  name: 'deployments_run',
  domain,
  badges: ['destructive', 'openWorld'],
  runsCommands: true,
  tracking,
  run: (a, ctx) => ctx.services.extensions.deployments.runTool(ctx.workspace, a, who(ctx), ctx.signal),
  workspace: 'optional',
  description:
    'Run an owner-enrolled deployment target in a short-lived sandbox with only its hosts and secrets (not enrolled or changed: PERMISSION_DENIED); timeoutMs is capped by the target\'s. Changes external systems.',
  input: {
    name: str(1, 120),
    timeoutMs: TIMEOUT_MS,
  },
});

export const skillSuggest = defineTool({
  name: 'skill_suggest',
  domain,
  badges: ['openWorld'],
  tracking,
  run: (a, ctx) => ctx.services.extensions.suggest(a.workspaceId ?? ctx.activeWorkspace(), a.prompt, who(ctx), ctx.signal),
  description:
    'Suggest at most one roster skill for a task, or none; the redacted prompt may go to a configured endpoint: no secrets.',
  input: {
    prompt: str(1, 65536),
    workspaceId: WSID.optional(),
  },
});

/** In spec order the memory notes (tools/memories.ts) stand between hooks and deployments. */
export const skillsAndHooks = [skillsList, skillsRead, skillsRun, hooksList, hooksRun, hooksActivate, hooksDeactivate];
export const deploymentsAndSuggest = [deploymentsList, deploymentsRun, skillSuggest];
