/**
 * The records of coding subagents (docs/agents.md): their states, the row, a running agent's state
 * in the runner, spawn's arguments, who calls, and what the service is given.
 */
import { type Span } from '../../telemetry/tracing.js';
import type { Server, Socket } from 'node:net';
import { type RuntimeSlot } from './pool.js';
import type { DB } from '../../store/db.js';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import type { AuditLog, Actor } from '../instance/index.js';
import type { Executor } from '../../sandbox/executor.js';
import type { GatewayClient } from '../models/index.js';
import type { SpendService } from '../models/index.js';
import type { ModelService } from '../models/index.js';
import type { WorkspaceService } from '../workspaces/index.js';
import type { EnvironmentService } from '../environments.js';
import type { LeaseInfo } from '../../contracts/gateway.js';
import type { CallerGrant } from '../../core/caller.js';
import { FULL_ACCESS, type Access } from '../../core/toolsets.js';
import {
  type AgentTool,
} from '../../contracts/agent.js';

export const AGENT_STATUSES = ['SPAWNING', 'RUNNING', 'CANCELLING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT', 'LIMIT_EXCEEDED', 'INTERRUPTED'] as const;
export type AgentStatus = (typeof AGENT_STATUSES)[number];
export const TERMINAL = new Set<AgentStatus>(['SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT', 'LIMIT_EXCEEDED', 'INTERRUPTED']);
export const LIVE_STATUSES = "('SPAWNING', 'RUNNING', 'CANCELLING')";

/** Tools an agent may never proxy even when a profile lists them: they act on the workspace as a whole or on the caller's session. */
export const NEVER_PROXIED = new Set(['workspace_close', 'workspace_set_active', 'workspace_recover', 'workspace_open']);
/** Bytes of one tool result fed back to the model (head and tail kept). */
export const TOOL_RESULT_CAP_BYTES = 16_384;
/** How long a cancelled or ending agent may drain before its sandbox is killed. */
export const DRAIN_MS = 3_000;
/** Log lines longer than this are cut (the log stays readable a page at a time). */
export const MAX_LOG_LINE = 16_384;


export interface AgentBudgets {
  ttlSeconds: number;
  maxOutputBytes: number;
  maxInputTokens: number;
  maxOutputTokens: number;
  maxCostMicros: number;
}

/** The spec's defaults of the budgets a child's carve takes from its parent (agent_spawn's schema publishes them). */
export const SPAWN_BUDGET_DEFAULTS = { maxInputTokens: 200_000, maxOutputTokens: 32_000, maxCostMicros: 10_000_000 } as const;
/** The budgets a child's carve takes from its parent, by spawn field. */
export type CarvedField = keyof typeof SPAWN_BUDGET_DEFAULTS;
export const CARVED_FIELDS = Object.keys(SPAWN_BUDGET_DEFAULTS) as CarvedField[];
/** The least each carved budget may be (the schema's minimum): a child defaulted below it is refused. */
export const CARVED_MIN: Record<CarvedField, number> = { maxInputTokens: 1, maxOutputTokens: 1, maxCostMicros: 0 };
/** Carve attempts when siblings spend the parent's room between two (each lowers the omitted budgets to what is left). */
export const CARVE_TRIES = 5;

/** agent_spawn's arguments; a carved budget left out (undefined) takes its default (under a parent, at most what the parent has left). */
export interface SpawnArgs extends Omit<AgentBudgets, CarvedField>, Partial<Pick<AgentBudgets, CarvedField>> {
  prompt: string;
  idempotencyKey: string;
  profileId: string;
  parentAgentId?: string;
  proxyOperations: string[];
  repositoryContext?: 'all' | 'profile_a' | 'profile_b' | 'profile_c' | 'profile_d' | 'none';
}

export interface AgentCaller {
  workspace: string;
  actor: Actor;
  principal: string;
  owner: string;
  /** What the caller may do: binds the agents it spawns and the agents it may message or cancel. */
  grant: CallerGrant;
}

/** How the service reaches the tool registry (set at composition by the server). */
export interface ToolGateway {
  call(
    name: string,
    args: Record<string, unknown>,
    cc: { principal: string; actor: Actor; signal: AbortSignal; access: Access; operations: Iterable<string> },
  ): Promise<{ isError?: boolean; content: Array<{ type: 'text'; text: string }>; structuredContent?: Record<string, unknown> }>;
  list: AgentTool[];
  /** The grant of a caller with this access (and, for an agent, these operations): what it may call. */
  grantFor(access: Access, operations: Iterable<string> | null): CallerGrant;
}

export interface Row {
  seq: number;
  id: string;
  owner_id: string;
  principal: string;
  spawned_by: string;
  workspace_id: string;
  parent_id: string | null;
  root_id: string;
  depth: number;
  idempotency_key: string;
  profile_id: string;
  revision: number;
  credential_id: string;
  api_mode: 'chat-completions' | 'responses';
  model: string;
  status: AgentStatus;
  prompt: string;
  proxy_ops_json: string;
  budgets_json: string;
  repository_context: string;
  lease_id: string | null;
  carved_micros: number;
  carved_input_tokens: number;
  carved_output_tokens: number;
  /** The access of whoever spawned the tree (JSON of Access); null on rows from before it was kept (full access). */
  access_json: string | null;
  used_json: string | null;
  log_bytes: number;
  summary: string | null;
  end_reason: string | null;
  error_json: string | null;
  cancel_reason: string | null;
  created_at: string;
  started_at: string | null;
  ended_at: string | null;
  expires_at: string;
}

export interface Live {
  id: string;
  row: Row;
  ops: Set<string>;
  budgets: AgentBudgets;
  deadlineMs: number;
  sandbox: AbortController;
  exited: Promise<void> | null;
  sockDir: string | null;
  servers: Server[];
  conn: Socket | null;
  leaseId: string | null;
  /** The part of the parent's lease set aside for this child until its own lease is issued (then null). */
  carveId: string | null;
  /** The access every proxied call of this agent is checked with. */
  access: Access;
  logBytes: number;
  outputCapped: boolean;
  steersSent: number;
  pendingSteers: string[];
  followUps: string[];
  cancelRequested: string | null;
  ending: Promise<void> | null;
  timers: NodeJS.Timeout[];
  calls: Set<AbortController>;
  lastLease: LeaseInfo | null;
  slot: RuntimeSlot | null;
  /** Whether the pool was told this agent no longer needs the CPUs to itself (pool.release, once). */
  released: boolean;
  /** Launch timing (ms since spawn accepted), logged at debug level once the first model turn starts. */
  t0: number;
  marks: Record<string, number>;
  /** Traces (docs/operations.md): the run's span (child of the spawning call's) and the current turn's; undefined when tracing is off. */
  span?: Span;
  turnSpan?: Span;
}

export interface Deps {
  db: DB;
  config: Config;
  log: Logger;
  audit: AuditLog;
  executor: Executor;
  gateway: GatewayClient;
  spend: SpendService;
  models: ModelService;
  workspaces: WorkspaceService;
  environments: EnvironmentService;
  /**
   * The tool registry, through which proxied calls run (same validation, confinement, redaction,
   * audit). The registry is built by the composition root before this service; its calls need the
   * App, so this is a callback (docs/architecture.md, "Composition").
   */
  tools: ToolGateway;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The access an agent's tree was spawned with (rows from before it was kept: full access). */
export function accessOf(row: Row): Access {
  if (!row.access_json) return FULL_ACCESS;
  try {
    const a = JSON.parse(row.access_json) as Access;
    return { toolsets: Array.isArray(a.toolsets) ? a.toolsets : null, readOnly: a.readOnly === true };
  } catch {
    return { toolsets: [], readOnly: true };
  }
}

/** A lease answer without its token (kept as the last known figures). */
export function leaseFigures(line: LeaseInfo & { token?: string; gatewayUrl?: string }): LeaseInfo {
  const { token: _token, gatewayUrl: _url, ...info } = line;
  return info as LeaseInfo;
}

export function clip(text: string, limit: number): string {
  return text.length <= limit ? text : `${text.slice(0, limit)}… [${text.length - limit} more characters]`;
}
