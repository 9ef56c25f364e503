/**
 * Spec section "Managed packages" (6 tools). The whole section exists only when the operator
 * sets PACKAGES_ENABLED to true.
 */
import { defineTool } from './define.js';
import { INT, PKAID, PKBID, PKPID, PKQID, PKRID, WSID, int, str, z } from './types.js';

const domain = 'Managed packages';
const tracking = '#20 packages' as const;

const SCOPE = z.enum(['owner', 'workspace']);

/** "3.<minor> or 3.<minor>.<patch>, each number 1-2 digits". */
const PYTHON = z
  .string()
  .min(3)
  .max(7)
  .regex(/^3\.\d{1,2}(\.\d{1,2})?$/)
  .describe('Python version for uv resolution: 3.<minor> or 3.<minor>.<patch>, each number 1-2 digits (e.g. 3.12 or 3.12.4)');

/** planDigest: 64 lowercase hexadecimal characters. */
const PLAN_DIGEST = z
  .string()
  .length(64)
  .regex(/^[0-9a-f]{64}$/)
  .describe('The planDigest returned with the plan: exactly 64 lowercase hexadecimal characters');

export const packagesPlan = defineTool({
  name: 'packages_plan',
  domain,
  badges: ['openWorld'],
  tracking,
  description:
    'Resolve a package into an immutable install plan (exact version, source, integrity, dependencies, size, binaries, conflicts, affected workspaces, planDigest) without installing it or running package code (uv: wheels only; npm lifecycle scripts off unless lifecycleScripts is true). ' +
    'Owner scope applies to all new workspaces and the bash toolbox target; workspace scope overrides it in one workspace (workspaceId required); ecosystem apt answers NOT_SUPPORTED. ' +
    'If resolution takes longer than about 20 s the result is a resolutionId in state RESOLVING: poll it with packages_status; a plan whose approval is required must be approved by the operator on the dashboard before packages_apply.',
  run: (a, ctx) => ctx.services.packages.plan(a, ctx.principal, ctx.actor),
  input: {
    ecosystem: z.enum(['npm', 'uv', 'apt']).describe('Package ecosystem; apt is not supported and answers NOT_SUPPORTED'),
    name: str(1, 214).describe('Package name as the ecosystem spells it'),
    version: str(1, 128).optional().describe('Version or version range to resolve (default: the latest)'),
    scope: SCOPE.default('owner').describe('owner: all new workspaces and the bash toolbox; workspace: only the workspace named by workspaceId. There is no instance scope'),
    workspaceId: WSID.optional().describe('Workspace to bind the package in; required when scope is workspace'),
    python: PYTHON.optional(),
    lifecycleScripts: z.boolean().optional().describe('npm only: allow package lifecycle scripts (off unless true)'),
  },
  check: (a) =>
    a.scope === 'workspace' && !a.workspaceId ? { field: 'workspaceId', message: 'required when scope is workspace' } : undefined,
});

export const packagesApply = defineTool({
  name: 'packages_apply',
  domain,
  badges: ['idempotent', 'openWorld'],
  tracking,
  description:
    'Build an approved plan into an immutable release in an isolated builder, verify its file tree and launch-check each binary with no network. Returns an applyId at once: poll packages_status with it; the release is installed only when the apply reaches SUCCEEDED. ' +
    'Applying the same plan again returns the same apply. Existing workspaces keep their mounted releases until recreated.',
  run: (a, ctx) => ctx.services.packages.apply(a.planId, a.planDigest, ctx.principal, ctx.actor),
  input: {
    planId: PKPID.describe('Package plan identifier from packages_plan'),
    planDigest: PLAN_DIGEST,
  },
});

export const packagesList = defineTool({
  name: 'packages_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description:
    'List package bindings and their verified releases (versions, digests, sizes, binaries, stale flag for releases built for an older executor image), optionally filtered by scope; includeHistory adds earlier releases usable with packages_rollback.',
  run: (a, ctx) => ctx.services.packages.list(a.scope, a.workspaceId, a.includeHistory),
  input: {
    scope: SCOPE.optional().describe('Only bindings of this scope (default: both)'),
    workspaceId: WSID.optional(),
    includeHistory: z.boolean().default(false).describe('Also list earlier releases of each binding (rollback history)'),
  },
});

export const packagesStatus = defineTool({
  name: 'packages_status',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description:
    'Poll managed-package work. With applyId: apply state, error code, bounded output tail and release id. With resolutionId: RESOLVING, READY with the plan, or FAILED with the error. ' +
    'With neither: a summary of in-flight applies, plans awaiting approval, missing releases and workspaces needing recreation. waitMs (max 30000) waits for a change before answering.',
  run: (a, ctx) => ctx.services.packages.status(a),
  input: {
    applyId: PKAID.optional().describe('Apply identifier from packages_apply'),
    resolutionId: PKQID.optional().describe('Resolution identifier from a packages_plan that was still RESOLVING'),
    waitMs: int(0, 30000).default(0).describe('Milliseconds to wait for the state to change before answering (0-30000)'),
  },
  check: (a) =>
    a.applyId !== undefined && a.resolutionId !== undefined
      ? { field: 'resolutionId', message: 'give applyId or resolutionId, not both' }
      : undefined,
});

export const packagesRollback = defineTool({
  name: 'packages_rollback',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  description:
    'Point a package binding back at an earlier verified release from its history (see packages_list with includeHistory). Needs no new approval. ' +
    'expectedGeneration is a compare-and-swap: if the binding moved meanwhile the call fails with STALE_GENERATION. Existing workspaces keep their mounted release until recreated.',
  run: (a, ctx) => ctx.services.packages.rollback(a.bindingId, a.releaseId, a.expectedGeneration, ctx.principal, ctx.actor),
  input: {
    bindingId: PKBID.describe('Package binding to roll back'),
    releaseId: PKRID.describe('Earlier release of that binding to bind again'),
    expectedGeneration: INT.describe('Current generation of the binding, as returned by packages_list'),
  },
});

export const packagesRemove = defineTool({
  name: 'packages_remove',
  domain,
  badges: ['destructive'],
  tracking,
  description:
    'Delete a package binding and its rollback history, and collect releases no retained workspace mounts. New workspaces stop seeing the package at once; existing ones keep it until recreated. ' +
    'Fails with STALE_GENERATION when expectedGeneration no longer matches, and with CONFLICT while an apply runs.',
  run: (a, ctx) => ctx.services.packages.remove(a.bindingId, a.expectedGeneration, ctx.principal, ctx.actor),
  input: {
    bindingId: PKBID.describe('Package binding to delete'),
    expectedGeneration: INT.describe('Current generation of the binding, as returned by packages_list'),
  },
});

export const tools = [packagesPlan, packagesApply, packagesList, packagesStatus, packagesRollback, packagesRemove];
