/** Spec section "Repository extensions" (15 tools): skills, hooks, memory notes, deployment targets. */
import { defineTool } from './define.js';
import { CUR, INT, SHA, WSID, int, name, str, z } from './types.js';

const domain = 'Repository extensions';
const tracking = 'repository extensions' as const;
const who = (ctx: { principal: string; actor: import('./context.js').Actor; caller: import('../core/caller.js').CallerGrant }) => ({ principal: ctx.principal, actor: ctx.actor, grant: ctx.caller });

/** Skill names: 1-120 chars of A-Za-z0-9._:- */
const SKILL_NAME = name(1, 120, ':').describe('Skill name: 1-120 characters of A-Z a-z 0-9 . _ : -');
const SKILL_SOURCE = z
  .enum(['built-in', 'owner', 'workspace', 'repository'])
  .describe('Where the skill comes from; omit to take the one that wins (the others are shadowed)');

const HOOK_EVENT = z.enum(['on_workspace_open', 'post_checkout', 'pre_commit', 'post_commit', 'manual']);
/** Arrays of hook events; five events exist, so at most five entries. */
const HOOK_EVENTS = z.array(HOOK_EVENT).min(1).max(5);

const TIMEOUT_MS = int(100, 300000).default(60000).describe('Time limit in milliseconds (100-300000)');
const APPROVAL_GRANT = str(1, 128).describe('Grant token from the approval flow, needed when the script requires approval');

export const skillsList = defineTool({
  name: 'skills_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  run: (a, ctx) => ctx.services.extensions.skills.listTool(ctx.workspace, a, ctx.signal),
  workspace: 'optional',
  description:
    'List the skills of a workspace from four sources (owner, built-in, workspace .atelier/skills, repository .agents/skills .claude/skills .github/skills skills) with description, scripts, problems and sha256, a page at a time. ' +
    'A name answers from the first source in that order (workspace_open skillOverrides may pick another); the others are listed as shadowed unless includeShadowed is false. Malformed skills are listed with their problems. Read one with skills_read.',
  input: {
    limit: int(1, 100).default(50).describe('Page size (1-100)'),
    cursor: CUR.optional(),
    includeShadowed: z.boolean().default(true).describe('Include skills hidden by a same-named skill from another source'),
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
    'Read one skill (SKILL.md first, then each of its files after a header line with its size and SHA-256) a byte range at a time (limit up to 262144 bytes per call; continue with nextOffset). ' +
    'source picks a shadowed skill; expectedSha256 makes the read fail if the skill changed since you listed it. To run one of its scripts use skills_run.',
  input: {
    name: SKILL_NAME,
    source: SKILL_SOURCE.optional(),
    expectedSha256: SHA.optional().describe('SHA-256 the skill must still have (from skills_list)'),
    offset: INT.default(0).describe('Byte offset to start reading at'),
    limit: int(1, 262144).default(65536).describe('Bytes to read (1-262144)'),
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
    'Run one script (a file of the skill\'s scripts/ directory) inside the workspace sandbox with arguments and a time limit (100-300000 ms); the output is handled as exec_run\'s. ' +
    'Pin what you reviewed with expectedSha256 (the skill) and expectedContentSha256 (the script). Scripts of repository and workspace skills need the owner\'s approval of that exact content: call without approvalGrantToken to file the request, then again with the grant. Use exec_run or bash for ad-hoc commands instead.',
  input: {
    name: SKILL_NAME,
    source: SKILL_SOURCE.optional(),
    script: name(1, 120).describe('Script of the skill to run: 1-120 characters of A-Z a-z 0-9 . _ -'),
    args: z.array(z.string().max(4096)).max(1000).default([]).describe('Arguments passed to the script (at most 1000, each at most 4096 characters)'),
    timeoutMs: TIMEOUT_MS,
    expectedSha256: SHA.optional().describe('SHA-256 the skill must still have'),
    expectedContentSha256: SHA.optional().describe('SHA-256 the skill content must still have'),
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
    'List the repository hooks of a workspace (from .atelier/hooks.json) and the events they run on (on_workspace_open, post_checkout, pre_commit, post_commit, manual), optionally for one event, with the manifest SHA-256 to activate. ' +
    'Only hooks activated by manifest digest (hooks_activate) are listed unless includeInactive is true; inactive ones say why (not activated, or the manifest changed).',
  input: {
    event: HOOK_EVENT.optional().describe('Only hooks for this event'),
    includeInactive: z.boolean().default(false).describe('Also list hooks that are not activated'),
    limit: int(1, 100).default(50).describe('Page size (1-100)'),
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
    'Run one activated repository hook now (for example a manual hook) with a time limit of 100-300000 ms. Hooks run only after hooks_activate enrolled their manifest digest. ' +
    'expectedSha256 and expectedManifestSha256 make the run fail if the hook or its manifest changed since you reviewed them.',
  input: {
    name: name(1, 120).describe('Hook name: 1-120 characters of A-Z a-z 0-9 . _ -'),
    event: HOOK_EVENT.optional().describe('Event to run the hook as'),
    expectedSha256: SHA.optional().describe('SHA-256 the hook must still have'),
    expectedManifestSha256: SHA.optional().describe('SHA-256 the hook manifest must still have'),
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
    'Enroll the repository hook manifest with this exact SHA-256 digest for the given events, so its hooks run automatically on them; a changed manifest needs a new activation. ' +
    'retentionSeconds (60-2592000) bounds how long the activation lasts. Undo with hooks_deactivate.',
  input: {
    manifestSha256: SHA.describe('Exact SHA-256 digest of the hook manifest you reviewed (see hooks_list)'),
    events: HOOK_EVENTS.describe('Events to activate the hooks for (1-5 entries)'),
    retentionSeconds: int(60, 2592000).optional().describe('How long the activation lasts, in seconds (60-2592000)'),
  },
});

export const hooksDeactivate = defineTool({
  name: 'hooks_deactivate',
  domain,
  badges: ['destructive'],
  tracking,
  run: (a, ctx) => ctx.services.extensions.hooks.deactivate(ctx.workspace, a.events, who(ctx)),
  workspace: 'optional',
  description: 'Withdraw hook activation in a workspace for the listed events, or for every event when events is omitted. Activate again with hooks_activate.',
  input: {
    events: HOOK_EVENTS.optional().describe('Events to deactivate (omit for all events)'),
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
    'List the deployment targets the repository of a workspace defines (.atelier/deployments.json): command, hosts it may reach, secrets it needs, SHA-256, and whether the owner enrolled exactly this definition. Run an enrolled one with deployments_run.',
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
    'Run one owner-enrolled deployment target of the workspace repository (a name from deployments_list) in a short-lived sandbox on the checkout, with a time limit of 100-300000 ms (capped by the target\'s own). ' +
    'It reaches only the hosts the target names and gets only the secrets its enrolment allows; returns status, output and every egress decision. It may change external systems.',
  input: {
    name: str(1, 120).describe('Deployment target name from deployments_list'),
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
    'Suggest at most one skill from the workspace roster that fits a task description (prompt up to 65536 characters); the answer is always a skill name from skills_list or none. ' +
    'When an integration key is configured, the redacted prompt is sent to the configured suggestion endpoint, so leave secrets out of it.',
  input: {
    prompt: str(1, 65536).describe('What you want to do (1-65536 characters)'),
    workspaceId: WSID.optional(),
  },
});

/** In spec order the memory notes (tools/memories.ts) stand between hooks and deployments. */
export const skillsAndHooks = [skillsList, skillsRead, skillsRun, hooksList, hooksRun, hooksActivate, hooksDeactivate];
export const deploymentsAndSuggest = [deploymentsList, deploymentsRun, skillSuggest];
