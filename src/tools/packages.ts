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
  .regex(/^3\.\d{1,2}(\.\d{1,2})?$/);

/** planDigest: 64 lowercase hexadecimal characters. */
const PLAN_DIGEST = z
  .string()
  .length(64)
  .regex(/^[0-9a-f]{64}$/);

export const packagesPlan = defineTool({
  name: 'packages_plan',
  domain,
  badges: ['openWorld'],
  tracking,
  description:
    'Resolve a package into an immutable plan (exact version, dependencies, conflicts, planDigest) without running its code (uv: wheels only). scope owner: new workspaces and the bash toolbox. apt: NOT_SUPPORTED. Slow: a resolutionId for packages_status. Approval-required plans need the operator\'s dashboard approval.',
  run: (a, ctx) => ctx.services.packages.plan(a, ctx.principal, ctx.actor),
  input: {
    ecosystem: z.enum(['npm', 'uv', 'apt']),
    name: str(1, 214),
    version: str(1, 128).optional(),
    scope: SCOPE.default('owner'),
    workspaceId: WSID.optional(),
    python: PYTHON.optional(),
    lifecycleScripts: z.boolean().optional(),
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
    'Build an approved plan into a verified release, offline; returns applyId: poll packages_status until SUCCEEDED. Same plan, same apply. Existing workspaces get it when recreated.',
  run: (a, ctx) => ctx.services.packages.apply(a.planId, a.planDigest, ctx.principal, ctx.actor),
  input: {
    planId: PKPID,
    planDigest: PLAN_DIGEST,
  },
});

export const packagesList = defineTool({
  name: 'packages_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description:
    'Bindings and releases (version, digest, size, binaries, stale: older executor image); includeHistory: earlier releases, for packages_rollback.',
  run: (a, ctx) => ctx.services.packages.list(a.scope, a.workspaceId, a.includeHistory),
  input: {
    scope: SCOPE.optional(),
    workspaceId: WSID.optional(),
    includeHistory: z.boolean().default(false),
  },
});

export const packagesStatus = defineTool({
  name: 'packages_status',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description:
    'applyId: state, error, output tail, release. resolutionId: RESOLVING, READY (plan) or FAILED. Neither: in-flight applies, pending approvals, missing releases, workspaces to recreate.',
  run: (a, ctx) => ctx.services.packages.status(a),
  input: {
    applyId: PKAID.optional(),
    resolutionId: PKQID.optional(),
    waitMs: int(0, 30000).default(0),
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
    'Rebind an earlier release (packages_list includeHistory), no new approval; existing workspaces get it when recreated. Stale expectedGeneration: STALE_GENERATION.',
  run: (a, ctx) => ctx.services.packages.rollback(a.bindingId, a.releaseId, a.expectedGeneration, ctx.principal, ctx.actor),
  input: {
    bindingId: PKBID,
    releaseId: PKRID,
    expectedGeneration: INT,
  },
});

export const packagesRemove = defineTool({
  name: 'packages_remove',
  domain,
  badges: ['destructive'],
  tracking,
  description:
    'Delete a binding, its history and unmounted releases; existing workspaces keep it until recreated. Stale expectedGeneration: STALE_GENERATION; apply running: CONFLICT.',
  run: (a, ctx) => ctx.services.packages.remove(a.bindingId, a.expectedGeneration, ctx.principal, ctx.actor),
  input: {
    bindingId: PKBID,
    expectedGeneration: INT,
  },
});

export const tools = [packagesPlan, packagesApply, packagesList, packagesStatus, packagesRollback, packagesRemove];
