/**
 * Numbered migrations. Never edit a released migration: add the next number.
 * Table ownership (only the owner reads or writes a table):
 *   services/access/tokens owner, api_tokens, dashboard_sessions, login_links
 *   services/instance/idempotency idempotency
 *   services/instance/audit audit_log
 *   services/access/principals principal_state
 *   services/environments environments, env_entries
 *   services/workspaces   workspaces
 *   services/models/spend spend_reservations, spend_policies, spend_cursor
 *   services/commands     operations, tasks, terminals
 *   services/approvals    approvals
 *   services/packages     package_plans, package_resolutions, package_applies, package_releases, package_bindings, package_binding_history, workspace_package_mounts
 *
 * From version 7 on, each migration is a file of its own under migrations/ (NNNN-name.ts),
 * listed at the end of MIGRATIONS, so that domains written side by side touch one line here.
 *   services/models/credentials provider_credentials
 *   services/models/profiles model_profiles, model_profile_revisions, model_verifications, model_catalog_cache
 *   services/repos/credentials repo_credentials
 *   services/access/tokens (0012) api_tokens.toolsets/read_only
 *   services/access/oauth oauth_clients, oauth_pending, oauth_codes, oauth_grants, oauth_tokens
 *   services/agents       agents (logs on disk under <dataDir>/state/agents/)
 *   services/extensions   owner_skills, extension_workspaces, hook_activations, deployment_enrolments
 *   services/memories     memory_notes
 *   services/knowledge    knowledge_projects, knowledge_items, knowledge_fts, knowledge_links
 *   services/artifacts    artifacts, artifact_blobs
 *   services/access/token-cache (0019) auth_epoch (moved by triggers on the token tables; only read)
 *   services/access/oauth (0020) oauth_tokens.scope
 *   services/access/oauth (0022) oauth_clients.metadata_url, doc_* (Client ID Metadata Documents)
 *   services/commands (0023) operations: tool calls run as MCP tasks
 *   services/instance/backups (0025) backups
 *   services/checkpoints (0027) checkpoints
 *   services/previews (0028) previews
 *   services/workspaces/templates (0029) workspace_templates; environments.setup_script/maintenance_script; env_entries.setup_only
 *   services/access/tokens (0030) api_tokens.dynamic_toolsets
 */
import { m0007 } from './migrations/0007-approvals.js';
import { m0009 } from './migrations/0009-spend-overruns.js';
import { m0010 } from './migrations/0010-agents.js';
import { m0012 } from './migrations/0012-access.js';
import { m0014 } from './migrations/0014-knowledge.js';
import { m0015 } from './migrations/0015-extensions.js';
import { m0016 } from './migrations/0016-packages.js';
import { m0018 } from './migrations/0018-knowledge-search.js';
import { m0019 } from './migrations/0019-auth-epoch.js';
import { m0020 } from './migrations/0020-caller-binding.js';
import { m0021 } from './migrations/0021-oauth-token-scope.js';
import { m0022 } from './migrations/0022-oauth-cimd.js';
import { m0023 } from './migrations/0023-mcp-tasks.js';
import { m0025 } from './migrations/0025-backups.js';
import { m0027 } from './migrations/0027-checkpoints.js';
import { m0028 } from './migrations/0028-previews.js';
import { m0024 } from './migrations/0024-knowledge-fts-recipe.js';
import { m0029 } from './migrations/0029-templates.js';
import { m0030 } from './migrations/0030-dynamic-toolsets.js';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const MIGRATIONS: Migration[] = [
  {
    version: 1,
    name: 'foundation',
    sql: `
      CREATE TABLE owner (
        id TEXT PRIMARY KEY,
        password_hash TEXT,
        created_at TEXT NOT NULL,
        password_set_at TEXT
      );
      CREATE TABLE api_tokens (
        id TEXT PRIMARY KEY,
        owner_id TEXT NOT NULL REFERENCES owner(id),
        name TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        created_at TEXT NOT NULL,
        last_used_at TEXT,
        revoked_at TEXT
      );
      CREATE TABLE dashboard_sessions (
        id_hash TEXT PRIMARY KEY,
        owner_id TEXT NOT NULL REFERENCES owner(id),
        csrf TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL
      );
      CREATE TABLE login_links (
        token_hash TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        used_at TEXT
      );
      CREATE TABLE idempotency (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        input_hash TEXT NOT NULL,
        result_json TEXT NOT NULL,
        is_error INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        PRIMARY KEY (scope, key)
      );
      CREATE INDEX idempotency_expiry ON idempotency(expires_at);
      CREATE TABLE audit_log (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        at TEXT NOT NULL,
        actor TEXT NOT NULL,
        principal TEXT,
        action TEXT NOT NULL,
        target TEXT,
        outcome TEXT NOT NULL,
        reason TEXT,
        details_json TEXT
      );
      CREATE INDEX audit_log_at ON audit_log(at);
      CREATE TABLE principal_state (
        principal TEXT PRIMARY KEY,
        active_workspace_id TEXT,
        updated_at TEXT NOT NULL
      );
    `,
  },
  {
    version: 2,
    name: 'environments and workspaces',
    sql: `
      CREATE TABLE environments (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        description TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL
      );
      CREATE TABLE env_entries (
        scope TEXT NOT NULL,
        name TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('variable', 'secret')),
        value TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (scope, name)
      );
      CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        owner_id TEXT NOT NULL,
        repository_url TEXT NOT NULL,
        ref TEXT,
        branch TEXT,
        head_oid TEXT,
        fetch_depth INTEGER,
        shallow_since TEXT,
        network_profile TEXT NOT NULL,
        environment_id TEXT,
        env_injected INTEGER NOT NULL DEFAULT 0,
        options_json TEXT NOT NULL DEFAULT '{}',
        state TEXT NOT NULL,
        state_reason TEXT,
        created_at TEXT NOT NULL,
        last_activity_at TEXT NOT NULL,
        lease_expires_at TEXT NOT NULL,
        hard_expires_at TEXT NOT NULL,
        closed_at TEXT,
        sandbox_json TEXT
      );
      CREATE INDEX workspaces_state ON workspaces(state, lease_expires_at);
      CREATE INDEX workspaces_created ON workspaces(created_at);
    `,
  },
  {
    version: 3,
    name: 'operations, tasks, terminals, approvals',
    sql: `
      CREATE TABLE operations (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        command TEXT NOT NULL,
        cwd TEXT NOT NULL,
        timeout_ms INTEGER NOT NULL,
        state TEXT NOT NULL,
        exit_code INTEGER,
        signal TEXT,
        reason TEXT,
        output_bytes INTEGER NOT NULL DEFAULT 0,
        output_truncated INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        ended_at TEXT
      );
      CREATE INDEX operations_ws ON operations(workspace_id, created_at);
      CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        command TEXT NOT NULL,
        cwd TEXT NOT NULL,
        timeout_ms INTEGER NOT NULL,
        depends_on TEXT NOT NULL,
        state TEXT NOT NULL,
        reason TEXT,
        exit_code INTEGER,
        signal TEXT,
        output_bytes INTEGER NOT NULL DEFAULT 0,
        output_truncated INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        started_at TEXT,
        ended_at TEXT
      );
      CREATE INDEX tasks_ws ON tasks(workspace_id, created_at);
      CREATE TABLE terminals (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('shell', 'session')),
        name TEXT,
        cwd TEXT NOT NULL,
        state TEXT NOT NULL,
        reason TEXT,
        pty_id TEXT,
        created_at TEXT NOT NULL,
        closed_at TEXT
      );
      CREATE UNIQUE INDEX terminals_open_session ON terminals(workspace_id, name) WHERE kind = 'session' AND state = 'open';
      CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        command_sha256 TEXT NOT NULL,
        command_preview TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at TEXT NOT NULL,
        decided_at TEXT,
        grant_hash TEXT,
        grant_expires_at TEXT,
        used_at TEXT
      );
    `,
  },
  {
    version: 4,
    name: 'model spend ledger',
    sql: `
      CREATE TABLE spend_reservations (
        id TEXT PRIMARY KEY,
        boot_id TEXT NOT NULL,
        lease_id TEXT,
        agent_id TEXT,
        profile_id TEXT,
        revision INTEGER,
        day TEXT NOT NULL,
        month TEXT NOT NULL,
        reserved_micros INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('open', 'settled', 'unreconciled')),
        cost_micros INTEGER NOT NULL DEFAULT 0,
        usage_json TEXT,
        reason TEXT,
        reserved_at TEXT NOT NULL,
        settled_at TEXT
      );
      CREATE INDEX spend_reservations_day ON spend_reservations(day, state);
      CREATE INDEX spend_reservations_month ON spend_reservations(month, state);
      CREATE INDEX spend_reservations_boot ON spend_reservations(boot_id, state);
      CREATE TABLE spend_policies (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        daily_cap_micros INTEGER,
        monthly_cap_micros INTEGER,
        per_agent_cap_micros INTEGER,
        updated_at TEXT NOT NULL
      );
      CREATE TABLE spend_cursor (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        boot_id TEXT NOT NULL,
        seq INTEGER NOT NULL
      );
    `,
  },
  {
    version: 5,
    name: 'model control plane',
    sql: `
      CREATE TABLE provider_credentials (
        id TEXT PRIMARY KEY,
        provider TEXT NOT NULL,
        label TEXT NOT NULL DEFAULT '',
        auth_header TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('active', 'disabled')),
        key_version INTEGER NOT NULL,
        key_sealed TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        last_check_json TEXT
      );
      CREATE TABLE model_profiles (
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL CHECK (status IN ('disabled', 'active')),
        generation INTEGER NOT NULL,
        latest_revision INTEGER NOT NULL,
        active_revision INTEGER,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        last_check_json TEXT
      );
      CREATE TABLE model_profile_revisions (
        profile_id TEXT NOT NULL,
        revision INTEGER NOT NULL,
        credential_id TEXT NOT NULL,
        custom_upstream_url TEXT,
        body_json TEXT NOT NULL,
        actor TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (profile_id, revision)
      );
      CREATE INDEX model_profile_revisions_cred ON model_profile_revisions(credential_id);
      CREATE TABLE model_verifications (
        id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        route_hash TEXT,
        result_json TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        consumed_at TEXT
      );
      CREATE INDEX model_verifications_principal ON model_verifications(principal, consumed_at);
      CREATE TABLE model_catalog_cache (
        cache_key TEXT PRIMARY KEY,
        provider TEXT NOT NULL,
        entries_json TEXT NOT NULL,
        fetched_at TEXT NOT NULL,
        last_error TEXT,
        last_attempt_at TEXT
      );
    `,
  },
  {
    version: 6,
    name: 'repository credentials',
    sql: `
      CREATE TABLE repo_credentials (
        id TEXT PRIMARY KEY,
        prefix TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL CHECK (kind IN ('token', 'github_app')),
        label TEXT NOT NULL DEFAULT '',
        username TEXT,
        app_id TEXT,
        installation_id TEXT,
        api_url TEXT,
        secret_version INTEGER NOT NULL,
        secret_sealed TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        last_used_at TEXT,
        last_error TEXT
      );
    `,
  },
  m0007,
  m0009,
  m0010,
  m0012,
  m0014,
  m0015,
  m0016,
  m0018,
  m0019,
  m0020,
  m0021,
  m0022,
  m0023,
  m0025,
  m0027,
  m0028,
  m0024,
  m0029,
  m0030,
];
