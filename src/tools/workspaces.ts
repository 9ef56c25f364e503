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
    'Clone an approved HTTPS repository into a new isolated, time-limited workspace and make it active. fetchDepth omitted: one commit; 0: full history. hardExpiresAt is a deadline no renewal moves.',
  input: {
    repositoryUrl: URI,
    ref: str(1, 255).optional(),
    idempotencyKey: IDEM,
    fetchDepth: int(0, 100000).optional(),
    shallowSince: ISO_DATE_OR_DATETIME.optional(),
    networkProfile: z
      .enum(['network-none', 'dependency-access'])
      .optional()
      .describe('Omitted: network-none (loopback); dependency-access: package registries only'),
    networkMode: z.never().optional(),
    environmentId: ENVID.optional(),
    confirmEnvironmentInjection: TRUE_ONLY.optional(),
    toolkits: z
      .array(z.string().min(1).max(220).regex(/^((npm|uv):)?[A-Za-z0-9@/._-]{1,214}$/))
      .max(50)
      .default([])
      .describe('Owner-bound package names; [] = all'),
    skillSets: z
      .array(
        z
          .object({
            name: z.enum(['built-in', 'owner', 'workspace', 'repository']),
            include: z.array(z.string().regex(/^[A-Za-z0-9._:-]{1,120}$/)).max(200).optional(),
            exclude: z.array(z.string().regex(/^[A-Za-z0-9._:-]{1,120}$/)).max(200).optional(),
          })
          .strict(),
      )
      .max(4)
      .refine((l) => new Set(l.map((x) => x.name)).size === l.length, { message: 'each skill set at most once' })
      .default([])
      .describe('[] = all four'),
    skillOverrides: z
      .record(
        z.string().regex(/^[A-Za-z0-9._:-]{1,120}$/),
        z
          .object({
            disabled: z.literal(true).optional(),
            source: z.enum(['built-in', 'owner', 'workspace', 'repository']).optional(),
          })
          .strict(),
      )
      .refine((o) => Object.keys(o).length <= 200, { message: 'at most 200 overrides' })
      .default({}),
    allowToolkitWorkspaceChanges: TRUE_ONLY.optional().describe('With toolkits: let workspace-scope bindings change them'),
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
  description: 'Your workspaces, newest first: id, repository, state, lease expiry, hardExpiresAt.',
  input: {
    cursor: CUR.optional(),
    limit: int(1, 500).default(100),
  },
});

export const workspaceStatus = defineTool({
  name: 'workspace_status',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#3 workspaces',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.workspaces.status(ctx.workspace),
  description: 'A workspace\'s state, repository, branch, lease expiry, hardExpiresAt and network profile.',
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
    'Authorizations, incl. repohostActions: the issue and PR actions repohost_action may take here. Mints no tokens.',
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
    'Orientation: id, branch, lease, git identity, languages, test commands, skills, instruction files (AGENTS.md, CLAUDE.md...) for clientProfile; contentMode excerpt adds their text.',
  input: {
    clientProfile: CLIENT_PROFILE.default('all').describe('a Claude Code, b Codex, c Copilot, d others'),
    include: z
      .array(z.enum(['instructions', 'languages', 'test_commands', 'skills']))
      .default(['instructions', 'languages', 'test_commands', 'skills']),
    contentMode: z.enum(['none', 'excerpt']).default('none'),
    cursor: CUR.optional(),
    limit: int(1, 100).default(50),
    maxBytes: int(4096, 131072).default(32768),
  },
});

export const workspaceSetActive = defineTool({
  name: 'workspace_set_active',
  domain,
  badges: ['idempotent'],
  tracking: '#3 workspaces',
  run: (a, ctx) => ctx.services.workspaces.setActive(ctx.principal, a.workspaceId),
  description: 'Make a workspace the active one, for calls that omit workspaceId.',
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
    'Extend the idle lease (default: the instance\'s) or revive an expired recoverable workspace; capped at hardExpiresAt (leaseCapped).',
  input: {
    extensionSeconds: int(60, 86400).optional(),
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
    'Expired recoverable workspace: resume, status, patch (its unpushed work) or export (push that to targetBranch).',
  input: {
    mode: z.enum(['resume', 'status', 'patch', 'export']).default('resume'),
    targetBranch: str(1, 255).optional(),
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
  description: 'Stop the workspace and delete all its files, unpushed commits included; irreversible. Push first.',
  input: {},
});

export const secretsList = defineTool({
  name: 'secrets_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#3 workspaces',
  run: (a, ctx) => ctx.services.workspaces.secretsList(a.workspaceId ?? ctx.activeWorkspace(), a),
  description: 'Names and descriptions of global and environment secrets, never values; commands see them as environment variables.',
  input: {
    workspaceId: WSID.optional(),
    environmentId: ENVID.optional(),
    query: z.string().max(200).optional(),
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
