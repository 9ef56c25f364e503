/** Spec section "Workspace lifecycle" (10 tools). */
import { defineTool } from './define.js';
import { CUR, ENVID, IDEM, ISO_DATE_OR_DATETIME, TRUE_ONLY, URI, WSID, int, str, z } from './types.js';

const domain = 'Workspace lifecycle';
const CLIENT_PROFILE = z.enum(['all', 'profile_a', 'profile_b', 'profile_c', 'profile_d']);

export const workspaceOpen = defineTool({
  name: 'workspace_open',
  domain,
  badges: ['idempotent', 'openWorld'],
  tracking: '#3 workspaces',
  // toolkits and allowToolkitWorkspaceChanges are managed-package bindings (docs/packages.md): checked by the packages service before anything is made.
  run: (a, ctx) => ctx.services.workspaces.open(a, ctx.principal, ctx.progress, ctx.signal),
  idempotency: 'key',
  description:
    'Clone an approved HTTPS repository into a new isolated workspace (non-root, no network by default, time-limited) and make it the active workspace. ' +
    'Use it once per repository you work on; later tools take the returned workspaceId or use the active one. ' +
    'Omitting fetchDepth clones a single commit; fetchDepth 0 clones the full history; shallowSince limits history by date. ' +
    'The result carries hardExpiresAt, a fixed deadline no renewal moves. The same idempotencyKey replays the first result.',
  input: {
    repositoryUrl: URI.describe('HTTPS URL of an operator-approved repository (no credentials in the URL)'),
    ref: str(1, 255).optional().describe('Branch, tag or commit to check out (default: the remote HEAD)'),
    idempotencyKey: IDEM,
    fetchDepth: int(0, 100000).optional().describe('Commits of history to fetch: 0 = full history; omitted = single commit'),
    shallowSince: ISO_DATE_OR_DATETIME.optional().describe('Fetch history since this ISO date or datetime (alternative to fetchDepth)'),
    networkProfile: z
      .enum(['network-none', 'dependency-access'])
      .optional()
      .describe('network-none (default): loopback only. dependency-access: only the configured package registries, through an egress proxy'),
    networkMode: z.never().optional().describe('Retired: rejected when sent. Use networkProfile.'),
    environmentId: ENVID.optional().describe('Owner-defined environment whose variables and secrets are injected (needs confirmEnvironmentInjection)'),
    confirmEnvironmentInjection: TRUE_ONLY.optional().describe('Must be true to inject the environment named by environmentId'),
    toolkits: z
      .array(z.string().min(1).max(220).regex(/^((npm|uv):)?[A-Za-z0-9@/._-]{1,214}$/))
      .max(50)
      .default([])
      .describe('Managed packages the workspace starts with: names of owner-bound packages ("name", or "npm:name" / "uv:name"); empty (the default) = every owner-bound package. Needs managed packages enabled'),
    skillSets: z
      .array(
        z
          .object({
            name: z.enum(['built-in', 'owner', 'workspace', 'repository']).describe('A skill source: built-in (shipped with Atelier), owner, workspace (.atelier/skills) or repository (.agents/skills, .claude/skills, .github/skills, skills)'),
            include: z.array(z.string().regex(/^[A-Za-z0-9._:-]{1,120}$/)).max(200).optional().describe('Only these skills of the set (names)'),
            exclude: z.array(z.string().regex(/^[A-Za-z0-9._:-]{1,120}$/)).max(200).optional().describe('Skills of the set left out (names)'),
          })
          .strict(),
      )
      .max(4)
      .refine((l) => new Set(l.map((x) => x.name)).size === l.length, { message: 'each skill set at most once' })
      .default([])
      .describe('Skill sets the workspace starts with (docs/extensions.md); [] = all four sources. Only the listed sets make the roster that skills_list, skills_run and skill_suggest see.'),
    skillOverrides: z
      .record(
        z.string().regex(/^[A-Za-z0-9._:-]{1,120}$/),
        z
          .object({
            disabled: z.literal(true).optional().describe('Leave this skill out of the roster'),
            source: z.enum(['built-in', 'owner', 'workspace', 'repository']).optional().describe('Take the skill of this name from this source, over the default shadowing order (owner, built-in, workspace, repository)'),
          })
          .strict(),
      )
      .refine((o) => Object.keys(o).length <= 200, { message: 'at most 200 overrides' })
      .default({})
      .describe('Per-skill overrides keyed by skill name: {"name": {"disabled": true}} or {"name": {"source": "repository"}}'),
    allowToolkitWorkspaceChanges: TRUE_ONLY.optional().describe('Only true, with toolkits: workspace-scope package bindings (packages_plan scope workspace) may add to or override the toolkits in this workspace; without it the toolkit set is fixed'),
  },
  retired: { networkMode: 'networkMode is retired and rejected; use networkProfile ("network-none" or "dependency-access")' },
  check: (args) => {
    if (args.fetchDepth !== undefined && args.shallowSince !== undefined)
      return { field: 'shallowSince', message: 'give fetchDepth or shallowSince, not both' };
    if (args.confirmEnvironmentInjection && !args.environmentId)
      return { field: 'confirmEnvironmentInjection', message: 'only meaningful with environmentId' };
    return undefined;
  },
});

export const workspaceList = defineTool({
  name: 'workspace_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#3 workspaces',
  run: (a, ctx) => ctx.services.workspaces.list(a.cursor, a.limit),
  description: 'List your workspaces (id, repository, state, lease expiry, hardExpiresAt), newest first, a page at a time with cursors.',
  input: {
    cursor: CUR.optional(),
    limit: int(1, 500).default(100).describe('Page size (1-500)'),
  },
});

export const workspaceStatus = defineTool({
  name: 'workspace_status',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#3 workspaces',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.workspaces.status(ctx.workspace),
  description: 'Lifecycle state and metadata of one workspace (the active one when workspaceId is omitted): state, repository, branch, lease expiry, hardExpiresAt, network profile.',
  input: {},
});

export const workspaceCapabilities = defineTool({
  name: 'workspace_capabilities',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#3 workspaces',
  workspace: 'optional',
  run: async (a, ctx) => ({ ...ctx.services.workspaces.capabilities(ctx.workspace), ...(await ctx.services.repohost.capabilities(ctx.workspace)) }),
  description:
    'Authorization capabilities of a workspace, including the repohostActions list: the authoritative list of issue and pull-request actions repohost_action may perform on this repository. Mints no tokens.',
  input: {},
});

export const workspaceContext = defineTool({
  name: 'workspace_context',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#3 workspaces',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.workspaces.context(ctx.workspace, a, ctx.signal),
  description:
    'Orientation for a coding session: active workspace id, branch, lease time, git identity and a repository overview (languages, test commands, instruction files such as AGENTS.md or CLAUDE.md chosen by clientProfile, skills). ' +
    'contentMode excerpt includes instruction-file text up to maxBytes; pages with cursor and limit.',
  input: {
    clientProfile: CLIENT_PROFILE.default('all').describe('Which client family the instruction files are chosen for: profile_a Claude Code, profile_b Codex/AGENTS.md, profile_c GitHub Copilot, profile_d Cursor/Gemini/others (docs/workspace-context.md)'),
    include: z
      .array(z.enum(['instructions', 'languages', 'test_commands', 'skills']))
      .default(['instructions', 'languages', 'test_commands', 'skills'])
      .describe('Sections to include'),
    contentMode: z.enum(['none', 'excerpt']).default('none').describe('none: names only; excerpt: include text of instruction files'),
    cursor: CUR.optional(),
    limit: int(1, 100).default(50),
    maxBytes: int(4096, 131072).default(32768).describe('Upper bound on the bytes of excerpted content'),
  },
});

export const workspaceSetActive = defineTool({
  name: 'workspace_set_active',
  domain,
  badges: ['idempotent'],
  tracking: '#3 workspaces',
  run: (a, ctx) => ctx.services.workspaces.setActive(ctx.principal, a.workspaceId),
  description: 'Make a workspace the active one: tools called without workspaceId then act on it.',
  input: { workspaceId: WSID },
});

export const workspaceLeaseRenew = defineTool({
  name: 'workspace_lease_renew',
  domain,
  badges: ['idempotent'],
  tracking: '#3 workspaces',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.workspaces.renew(ctx.workspace, a.extensionSeconds),
  description:
    'Extend the idle lease of a workspace, or reactivate one that expired into the recoverable state. Never passes hardExpiresAt: when capped, the result has leaseCapped true, requestedExpiresAt and a leaseWarnings entry.',
  input: {
    extensionSeconds: int(60, 86400).optional().describe('Seconds to extend the lease by (60-86400; default: the instance idle lease)'),
  },
});

export const workspaceRecover = defineTool({
  name: 'workspace_recover',
  domain,
  badges: ['destructive'],
  tracking: '#3 workspaces',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.workspaces.recover(ctx.workspace, a.mode, a.targetBranch, ctx.principal),
  description:
    'Work with an expired, recoverable workspace: resume it (mode resume), inspect it (status), get its unpushed work as a patch (patch), or push its unpushed work to targetBranch through the credential broker (export).',
  input: {
    mode: z.enum(['resume', 'status', 'patch', 'export']).default('resume'),
    targetBranch: str(1, 255).optional().describe('Branch to push unpushed work to (mode export)'),
  },
  check: (a) => (a.mode === 'export' && !a.targetBranch ? { field: 'targetBranch', message: 'required when mode is export' } : undefined),
});

export const workspaceClose = defineTool({
  name: 'workspace_close',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking: '#3 workspaces',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.workspaces.close(ctx.workspace),
  description: 'Stop the workspace executor and permanently delete all of its files, including unpushed commits. Push or export first if you need the work.',
  input: {},
});

export const secretsList = defineTool({
  name: 'secrets_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#3 workspaces',
  run: (a, ctx) => ctx.services.workspaces.secretsList(a.workspaceId ?? ctx.activeWorkspace(), a),
  description: 'List global and environment secret names with their descriptions. Values are never revealed; commands reference secrets by name (as environment variables).',
  input: {
    workspaceId: WSID.optional(),
    environmentId: ENVID.optional(),
    query: z.string().max(200).optional().describe('Case-insensitive substring of the name or description'),
    cursor: CUR.optional(),
    limit: int(1, 500).default(100),
  },
});

export const tools = [
  workspaceOpen,
  workspaceList,
  workspaceStatus,
  workspaceCapabilities,
  workspaceContext,
  workspaceSetActive,
  workspaceLeaseRenew,
  workspaceRecover,
  workspaceClose,
  secretsList,
];
