/**
 * The records of workspaces (docs/workspaces.md): the row as the services read it, the open's
 * arguments, what the workspace service is given, and the fork template a checkpoint keeps.
 */
import type { DB } from '../../store/db.js';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import type { AuditLog } from '../instance/index.js';
import type { PrincipalState } from '../access/index.js';
import type { WorkspaceLocks } from '../../core/locks.js';
import type { CursorCodec } from '../../core/cursor.js';
import type { EphemeralBind, Executor } from '../../sandbox/executor.js';
import type { RepositoryPolicy } from '../repos/index.js';
import type { EnvironmentService } from '../environments.js';
import type { RepoCredentialStore } from '../repos/index.js';
import type { HookRunner } from '../extensions/index.js';
import type { TemplateService } from './templates/builds.js';

/** What a fork copies of its source workspace (WorkspaceService.forkTemplate); kept with a checkpoint. */
export interface ForkTemplate {
  workspaceId: string;
  repositoryUrl: string;
  ref: string | null;
  branch: string | null;
  headOid: string | null;
  networkProfile: NetworkProfile;
  environmentId: string | null;
  envInjected: boolean;
  options: Record<string, unknown>;
}

export type WorkspaceState = 'opening' | 'active' | 'expired_recoverable' | 'closed';
export type NetworkProfile = 'network-none' | 'dependency-access';

export interface WorkspaceRow {
  id: string;
  repositoryUrl: string;
  ref: string | null;
  branch: string | null;
  headOid: string | null;
  cloneOid: string | null;
  networkProfile: NetworkProfile;
  environmentId: string | null;
  envInjected: boolean;
  state: WorkspaceState;
  stateReason: string | null;
  createdAt: string;
  lastActivityAt: string;
  leaseExpiresAt: string;
  hardExpiresAt: string;
  closedAt: string | null;
  gitIdentity: { name: string; email: string } | null;
}

export interface OpenArgs {
  repositoryUrl: string;
  ref?: string;
  fetchDepth?: number;
  shallowSince?: string;
  networkProfile?: NetworkProfile;
  environmentId?: string;
  confirmEnvironmentInjection?: true;
  toolkits: string[];
  skillSets: unknown[];
  skillOverrides: Record<string, unknown>;
  allowToolkitWorkspaceChanges?: true;
}

export interface Deps {
  db: DB;
  config: Config;
  log: Logger;
  audit: AuditLog;
  principals: PrincipalState;
  cursors: CursorCodec;
  executor: Executor;
  repos: RepositoryPolicy;
  repoCredentials: RepoCredentialStore;
  environments: EnvironmentService;
  /** Set in unsafe development mode: no sandboxes can be made, so no workspace opens. */
  sandboxDisabledReason?: string;
  /** Managed packages: the read-only release mounts and PATH of a workspace's sandbox. */
  packages?: {
    mountsFor(workspaceId: string): Promise<{ mounts: EphemeralBind[]; env: Record<string, string> }>;
    /** Checks workspace_open's toolkits (names of owner-bound packages) before anything is made. */
    validateToolkits(toolkits: string[], allowChanges: boolean): void;
  };
  /** Repository extensions (issue #19): records skillSets/skillOverrides and fires on_workspace_open hooks. */
  hooks?: HookRunner;
  /** The per-workspace lock shared with the git tools (core/locks.ts). */
  locks: WorkspaceLocks;
  /** Setup that runs once (docs/templates.md): opens with an environment that has a setup script start from a template. */
  templates?: TemplateService;
  /** Other services clean up their records of a workspace when it is removed (run in order, failures logged). */
  onClose?: Array<(id: string) => Promise<void>>;
}

export const GIT_BIN = '/usr/bin/git';
export const SHA_RE = /^[0-9a-f]{7,64}$/;

export function rowOf(row: Record<string, unknown>): WorkspaceRow {
  const opts = JSON.parse((row.options_json as string) || '{}') as Record<string, unknown>;
  return {
    id: row.id as string,
    repositoryUrl: row.repository_url as string,
    ref: (row.ref as string | null) ?? null,
    branch: (row.branch as string | null) ?? null,
    headOid: (row.head_oid as string | null) ?? null,
    cloneOid: (opts.cloneOid as string | undefined) ?? null,
    networkProfile: row.network_profile as NetworkProfile,
    environmentId: (row.environment_id as string | null) ?? null,
    envInjected: row.env_injected === 1,
    state: row.state as WorkspaceState,
    stateReason: (row.state_reason as string | null) ?? null,
    createdAt: row.created_at as string,
    lastActivityAt: row.last_activity_at as string,
    leaseExpiresAt: row.lease_expires_at as string,
    hardExpiresAt: row.hard_expires_at as string,
    closedAt: (row.closed_at as string | null) ?? null,
    gitIdentity: (opts.gitIdentity as WorkspaceRow['gitIdentity']) ?? null,
  };
}

/** After an open, how long the next open's spare sandbox waits before it starts (the new workspace's first commands go first). */
export const SPARE_SANDBOX_DELAY_MS = 500;

/** How long shutdown waits for running lifecycle and git steps before stopping sandboxes under them. */
export const SHUTDOWN_LOCK_WAIT_MS = 20_000;


