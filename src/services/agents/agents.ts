/**
 * Coding subagents (issue #14): the runner's agent service and supervisor. Owns the agents table
 * and the per-agent logs under <dataDir>/state/agents/. Each agent runs the agent runtime
 * (src/agent/runtime.ts) in a short-lived bubblewrap sandbox of its own (no network, no workspace
 * files) with two Unix sockets bound in: one relayed to the gateway's agent endpoint, one to this
 * supervisor (proxied tool calls through the same tool registry as MCP calls, events, budgets,
 * messages). The supervisor ends agents on TTL, budget, output bytes, cancel (cascading down the
 * tree) or runtime exit, revokes their leases and settles their spend. See docs/agents.md.
 */
import { contextOf, failSpan, injectHeaders, setAttrs, startSpan, withSpanContext, type Span } from '../../telemetry/tracing.js';
import { appendFileSync, existsSync, mkdirSync, openSync, readSync, closeSync, rmSync, statSync } from 'node:fs';
import type { Server, Socket } from 'node:net';
import { join } from 'node:path';
import { AgentRuntimePool, SLOT_READY_MS, type RuntimeSlot } from './pool.js';
import type { DB } from '../../store/db.js';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import type { AuditLog, Actor } from '../instance/index.js';
import { ServiceError, errorEnvelope, toErrorBody } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import type { Executor } from '../../sandbox/executor.js';
import type { ClientProfile } from '../../sandbox/daemon/protocol.js';
import type { GatewayClient } from '../models/index.js';
import type { SpendService } from '../models/index.js';
import type { ModelService } from '../models/index.js';
import type { WorkspaceService } from '../workspaces/index.js';
import type { EnvironmentService } from '../environments.js';
import type { LeaseInfo } from '../../contracts/gateway.js';
import type { CallerGrant } from '../../core/caller.js';
import { FULL_ACCESS, describeAccess, intersect, type Access } from '../../core/toolsets.js';
import {
  type AgentStartConfig,
  type AgentTool,
  type BudgetView,
  type RunnerMessage,
  type RuntimeMessage,
} from '../../contracts/agent.js';

export const AGENT_STATUSES = ['SPAWNING', 'RUNNING', 'CANCELLING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT', 'LIMIT_EXCEEDED', 'INTERRUPTED'] as const;
export type AgentStatus = (typeof AGENT_STATUSES)[number];
const TERMINAL = new Set<AgentStatus>(['SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT', 'LIMIT_EXCEEDED', 'INTERRUPTED']);
const LIVE_STATUSES = "('SPAWNING', 'RUNNING', 'CANCELLING')";

/** Tools an agent may never proxy even when a profile lists them: they act on the workspace as a whole or on the caller's session. */
export const NEVER_PROXIED = new Set(['workspace_close', 'workspace_set_active', 'workspace_recover', 'workspace_open']);
/** Bytes of one tool result fed back to the model (head and tail kept). */
export const TOOL_RESULT_CAP_BYTES = 16_384;
/** How long a cancelled or ending agent may drain before its sandbox is killed. */
export const DRAIN_MS = 3_000;
/** Log lines longer than this are cut (the log stays readable a page at a time). */
const MAX_LOG_LINE = 16_384;


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
type CarvedField = keyof typeof SPAWN_BUDGET_DEFAULTS;
const CARVED_FIELDS = Object.keys(SPAWN_BUDGET_DEFAULTS) as CarvedField[];
/** The least each carved budget may be (the schema's minimum): a child defaulted below it is refused. */
const CARVED_MIN: Record<CarvedField, number> = { maxInputTokens: 1, maxOutputTokens: 1, maxCostMicros: 0 };
/** Carve attempts when siblings spend the parent's room between two (each lowers the omitted budgets to what is left). */
const CARVE_TRIES = 5;

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

interface Row {
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

interface Live {
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

interface Deps {
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class AgentService {
  private readonly live = new Map<string, Live>();
  private readonly logDir: string;
  private readonly runDir: string;
  private pool_: AgentRuntimePool | null = null;
  private poolTimer: NodeJS.Timeout | null = null;

  constructor(private readonly deps: Deps) {
    this.logDir = join(deps.config.dataDir, 'state', 'agents');
    this.runDir = join(deps.config.dataDir, 'run', 'agents');
  }

  /** Agent runtimes: pre-started idle ones (agentPoolSize) and those started on demand (src/services/agents/pool.ts). */
  private get pool(): AgentRuntimePool {
    this.pool_ ??= new AgentRuntimePool({
      executor: this.deps.executor,
      log: this.deps.log,
      sandboxUid: this.deps.config.sandboxUid,
      runDir: this.runDir,
      optDir: join(this.deps.config.dataDir, 'run', 'agent-opt'),
      gatewayEndpoint: () => this.deps.gateway.agentEndpoint(),
      size: this.deps.config.agentPoolSize ?? 1,
    });
    return this.pool_;
  }

  /** Idle runtimes are kept only while an agent profile is active (no profile, no agent, no pool). */
  private tendPool(): void {
    if (!(this.deps.config.agentPoolSize > 0)) return;
    let active = false;
    try {
      active = ((this.deps.models.list().profiles as Array<{ status?: string }>) ?? []).some((p) => p.status === 'active');
    } catch {
      active = false;
    }
    this.pool.want(active);
  }

  /** For the dashboard and tests: the pool's figures. */
  poolStats(): { size: number; idle: number; ready: number; running: number } {
    return this.pool_?.stats() ?? { size: this.deps.config.agentPoolSize ?? 0, idle: 0, ready: 0, running: 0 };
  }

  // ------------------------------------------------------------------ lifecycle

  /** After a restart: agents that were running end INTERRUPTED, their leases revoked and spend settled or marked unreconciled. */
  async startup(): Promise<void> {
    mkdirSync(this.logDir, { recursive: true, mode: 0o700 });
    rmSync(this.runDir, { recursive: true, force: true });
    const rows = this.deps.db.prepare(`SELECT * FROM agents WHERE status IN ${LIVE_STATUSES}`).all() as Row[];
    for (const row of rows) {
      if (row.lease_id) await this.deps.gateway.revokeLease(row.lease_id).catch(() => null);
      this.appendRaw(row.id, { type: 'status', status: 'INTERRUPTED', reason: 'the runner stopped while the agent ran' });
      this.deps.db
        .prepare(`UPDATE agents SET status = 'INTERRUPTED', end_reason = ?, ended_at = ? WHERE id = ? AND status IN ${LIVE_STATUSES}`)
        .run('the runner stopped while the agent ran; its lease was revoked and its open spend is settled or marked unreconciled', new Date().toISOString(), row.id);
    }
    if (rows.length) await this.deps.gateway.syncUsage().catch(() => undefined);
    this.tendPool();
    this.poolTimer = setInterval(() => this.tendPool(), 2_000);
    this.poolTimer.unref();
  }

  /** Runner stop: every live agent ends INTERRUPTED (sandbox killed, lease revoked). */
  async shutdown(): Promise<void> {
    if (this.poolTimer) clearInterval(this.poolTimer);
    const pool = this.pool_?.close();
    await Promise.all([...this.live.values()].map((l) => this.finish(l, 'INTERRUPTED', { reason: 'the runner stopped while the agent ran', drainMs: 0 })));
    await pool;
  }

  // ------------------------------------------------------------------ spawn

  async spawn(spawnArgs: SpawnArgs, agentCaller: AgentCaller): Promise<Record<string, unknown>> {
    const callerAgent = agentCaller.actor.startsWith('agent_') ? this.row(agentCaller.actor) : null;
    let parentId = spawnArgs.parentAgentId;
    if (callerAgent) {
      if (parentId !== undefined && parentId !== callerAgent.id)
        throw new ServiceError('PERMISSION_DENIED', `parentAgentId: an agent spawns its own children only (${callerAgent.id})`, { field: 'parentAgentId' });
      parentId = callerAgent.id;
    }
    // The profile: active, pinned at its active revision and credential.
    const pin = this.deps.models.pinnable(spawnArgs.profileId);
    if (pin.status !== 'active' || !pin.body || pin.revision === null)
      throw new ServiceError('FAILED_PRECONDITION', `profileId: profile ${spawnArgs.profileId} is ${pin.status}; agent_spawn uses an active profile only (the owner activates it on the dashboard)`, { field: 'profileId', status: pin.status });
    if (pin.credentialStatus !== 'active')
      throw new ServiceError('FAILED_PRECONDITION', `profileId: the credential of profile ${spawnArgs.profileId} is ${pin.credentialStatus}`, { field: 'profileId', credentialStatus: pin.credentialStatus });
    const ops = this.checkOperations(spawnArgs.proxyOperations, pin.body.maxProxyOperations, spawnArgs.profileId, agentCaller.grant);
    // The parent: same workspace, live, and its tree carries agent_spawn and these operations.
    let parent: Row | null = null;
    if (parentId) {
      const found = this.deps.db.prepare('SELECT * FROM agents WHERE id = ?').get(parentId) as Row | undefined;
      if (!found) throw new ServiceError('NOT_FOUND', `parentAgentId: no agent ${parentId}`, { field: 'parentAgentId' });
      parent = found;
      if (parent.workspace_id !== agentCaller.workspace) throw new ServiceError('NOT_FOUND', `parentAgentId: no agent ${parentId} in workspace ${agentCaller.workspace}`, { field: 'parentAgentId' });
      if (TERMINAL.has(parent.status) || parent.status === 'CANCELLING')
        throw new ServiceError('FAILED_PRECONDITION', `parentAgentId: agent ${parentId} is ${parent.status}; children are spawned under a live agent only`, { field: 'parentAgentId', status: parent.status });
      const parentOps = new Set(JSON.parse(parent.proxy_ops_json) as string[]);
      const wider = ops.filter((o) => !parentOps.has(o));
      if (wider.length)
        throw new ServiceError('PERMISSION_DENIED', `proxyOperations: a child may use only its parent's operations; not allowed: ${wider.join(', ')}`, { field: 'proxyOperations', operations: wider, rule: "a child's operations lie within its parent's" });
      // A child spawned by the owner (not by its parent agent) is bound by the tree's access too.
      const parentAccess = accessOf(parent);
      const treeGrant = this.deps.tools.grantFor(parentAccess, null);
      const outside = ops.filter((o) => treeGrant.problem(o) !== null);
      if (outside.length)
        throw new ServiceError('PERMISSION_DENIED', `proxyOperations: outside the access of the tree of ${parent.id} (${describeAccess(parentAccess)}): ${outside.join(', ')}`, { field: 'proxyOperations', operations: outside, rule: 'the access of whoever spawned the root binds the whole tree' });
    }
    // The access every call of the new agent is checked with: its spawner's, within its tree's.
    const access = parent ? intersect(agentCaller.grant.access, accessOf(parent)) : agentCaller.grant.access;
    const ws = this.deps.workspaces.get(agentCaller.workspace);
    if (ws.state !== 'active') throw new ServiceError('FAILED_PRECONDITION', `workspace ${agentCaller.workspace} is ${ws.state}`, { field: 'workspaceId', state: ws.state });

    // Routing rule 8: push again when the gateway restarted or lost its profiles; UNAVAILABLE when unreachable.
    await this.deps.gateway.ensureReady();

    const id = newId('agent');
    // The carved budgets: as given, else the spec's default (under a parent, lowered below to what it has left).
    const carved: Record<CarvedField, number> = { maxInputTokens: spawnArgs.maxInputTokens ?? SPAWN_BUDGET_DEFAULTS.maxInputTokens, maxOutputTokens: spawnArgs.maxOutputTokens ?? SPAWN_BUDGET_DEFAULTS.maxOutputTokens, maxCostMicros: spawnArgs.maxCostMicros ?? SPAWN_BUDGET_DEFAULTS.maxCostMicros };
    const omitted = CARVED_FIELDS.filter((f) => spawnArgs[f] === undefined);
    // A child's budgets (cost and both token budgets) are carved out of what its parent has left,
    // atomically on the parent's lease at the gateway; the carve becomes the child's lease.
    let carveId: string | null = null;
    let defaulted: Array<Record<string, unknown>> | undefined;
    if (parent) {
      const pl = parent.lease_id ? this.live.get(parent.id) : undefined;
      if (!pl || !parent.lease_id) throw new ServiceError('FAILED_PRECONDITION', `parentAgentId: agent ${parent.id} holds no live lease yet; retry once it runs`, { field: 'parentAgentId', status: parent.status });
      const r = await this.carveChild(parent, carved, omitted);
      carveId = r.carveId;
      defaulted = r.defaulted;
    }
    const now = Date.now();
    const budgets: AgentBudgets = { ttlSeconds: spawnArgs.ttlSeconds, maxOutputBytes: spawnArgs.maxOutputBytes, ...carved };
    const row: Row = {
      seq: 0,
      id,
      owner_id: agentCaller.owner,
      principal: agentCaller.principal,
      spawned_by: agentCaller.actor,
      workspace_id: agentCaller.workspace,
      parent_id: parent?.id ?? null,
      root_id: parent?.root_id ?? id,
      depth: parent ? parent.depth + 1 : 0,
      idempotency_key: spawnArgs.idempotencyKey,
      profile_id: spawnArgs.profileId,
      revision: pin.revision,
      credential_id: pin.body.credentialId,
      api_mode: pin.body.apiMode,
      model: pin.body.model,
      status: 'SPAWNING',
      prompt: spawnArgs.prompt,
      proxy_ops_json: JSON.stringify(ops),
      budgets_json: JSON.stringify(budgets),
      repository_context: spawnArgs.repositoryContext ?? 'profile_a',
      lease_id: null,
      carved_micros: parent ? carved.maxCostMicros : 0,
      carved_input_tokens: parent ? carved.maxInputTokens : 0,
      carved_output_tokens: parent ? carved.maxOutputTokens : 0,
      access_json: JSON.stringify(access),
      used_json: null,
      log_bytes: 0,
      summary: null,
      end_reason: null,
      error_json: null,
      cancel_reason: null,
      created_at: new Date(now).toISOString(),
      started_at: null,
      ended_at: null,
      expires_at: new Date(now + spawnArgs.ttlSeconds * 1000).toISOString(),
    };
    const cols = Object.keys(row).filter((k) => k !== 'seq');
    try {
      this.deps.db.prepare(`INSERT INTO agents (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`).run(...cols.map((k) => (row as unknown as Record<string, unknown>)[k]));
    } catch (e) {
      if (carveId) await this.deps.gateway.releaseCarve(carveId).catch(() => false);
      throw e;
    }
    const stored = this.row(id);
    const live: Live = {
      id,
      row: stored,
      ops: new Set(ops),
      budgets,
      deadlineMs: now + spawnArgs.ttlSeconds * 1000,
      sandbox: new AbortController(),
      exited: null,
      sockDir: null,
      servers: [],
      conn: null,
      leaseId: null,
      carveId,
      access,
      logBytes: 0,
      outputCapped: false,
      steersSent: 0,
      pendingSteers: [],
      followUps: [],
      cancelRequested: null,
      ending: null,
      timers: [],
      calls: new Set(),
      lastLease: null,
      slot: null,
      released: false,
      t0: performance.now(),
      marks: {},
    };
    live.span = startSpan('invoke_agent', {
      attributes: { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.id': id, 'gen_ai.request.model': pin.body.model, 'atelier.agent.profile_id': spawnArgs.profileId, 'atelier.agent.depth': row.depth, 'atelier.agent.parent_id': row.parent_id, 'atelier.workspace.id': row.workspace_id },
    });
    this.live.set(id, live);
    this.log(live, { type: 'status', status: 'SPAWNING', profileId: spawnArgs.profileId, revision: pin.revision, model: pin.body.model, apiMode: pin.body.apiMode, proxyOperations: ops, budgets, parentAgentId: row.parent_id });
    void this.launch(live);
    return { agentId: id, status: 'SPAWNING', workspaceId: agentCaller.workspace, parentAgentId: row.parent_id, profileId: spawnArgs.profileId, revision: pin.revision, model: pin.body.model, apiMode: pin.body.apiMode, proxyOperations: ops, budgets, ...(defaulted ? { budgetsDefaulted: defaulted } : {}), expiresAt: row.expires_at };
  }

  /**
   * Carves a child's budgets out of its parent's lease (issue #42 item 10; docs/agents.md "Trees").
   * A budget given explicitly is carved as given, and one above what the parent has left is
   * refused naming its field. An omitted one (`omitted`) takes the smaller of the spec's default
   * and what the parent has left: the gateway's refusal says what is left, the omitted budgets are
   * lowered to it and the carve tried again (each try is atomic at the gateway; a sibling spending
   * in between only lowers them further). `carved` is updated in place; `defaulted` names each
   * budget lowered: its field, the default it replaced and the value it got (what the parent had left).
   */
  private async carveChild(parent: Row, carved: Record<CarvedField, number>, omitted: CarvedField[]): Promise<{ carveId: string; defaulted?: Array<Record<string, unknown>> }> {
    const lowered = new Map<CarvedField, number>();
    for (let attempt = 1; ; attempt++) {
      const r = await this.deps.gateway.carve(parent.lease_id!, { inputTokens: carved.maxInputTokens, outputTokens: carved.maxOutputTokens, costMicros: carved.maxCostMicros });
      if (r.ok) {
        if (lowered.size === 0) return { carveId: r.carveId };
        const reason = `omitted: the spec's default is more than parent ${parent.id} had left, so the child got what was left`;
        return { carveId: r.carveId, defaulted: [...lowered].map(([field, value]) => ({ field, specDefault: SPAWN_BUDGET_DEFAULTS[field], value, reason })) };
      }
      const rem = r.parentRemaining;
      const field = (r.field ?? 'maxCostMicros') as CarvedField;
      const left: Record<CarvedField, number> | null = rem ? { maxInputTokens: rem.inputTokens, maxOutputTokens: rem.outputTokens, maxCostMicros: rem.costMicros } : null;
      const refuse = (f: CarvedField, why: string) =>
        new ServiceError(
          'FAILED_PRECONDITION',
          `${f}: ${why} what parent ${parent.id} has left of its ${f === 'maxCostMicros' ? 'cost budget' : f === 'maxInputTokens' ? 'input token budget' : 'output token budget'} (${left ? left[f] : 'unknown'}${f === 'maxCostMicros' ? ' micro-USD' : ' tokens'}); a tree never spends more than its root was given`,
          { field: f, parentRemaining: left, parentRemainingMicros: left?.maxCostMicros ?? null, ...(omitted.includes(f) ? { rule: 'an omitted budget defaults to what the parent has left, at least the field\'s minimum' } : {}) },
        );
      // An explicit budget that does not fit, or no room known to default to: refused as before
      // (the explicit ones first: they are the caller's own numbers).
      if (!omitted.includes(field) || !left) throw refuse(field, `${carved[field]} would pass`);
      const explicitOver = CARVED_FIELDS.find((f) => !omitted.includes(f) && carved[f] > left[f]);
      if (explicitOver) throw refuse(explicitOver, `${carved[explicitOver]} would pass`);
      for (const f of omitted) {
        if (carved[f] <= left[f]) continue;
        if (left[f] < CARVED_MIN[f]) throw refuse(f, `omitted, and its default (${SPAWN_BUDGET_DEFAULTS[f]}) cannot be lowered to fit: nothing is left of`);
        carved[f] = left[f];
        lowered.set(f, left[f]);
      }
      // The explicit budgets are checked on the next try with the omitted ones lowered.
      if (attempt >= CARVE_TRIES) throw refuse(field, `${carved[field]} (lowered to fit, but the parent kept spending) would pass`);
    }
  }

  /**
   * proxyOperations must name proxyable catalog tools (INVALID_ARGUMENT otherwise) and lie within
   * the pinned revision's maxProxyOperations (OWNER_APPROVAL_REQUIRED otherwise: only the owner
   * can widen what a profile may proxy, see docs/agents.md).
   */
  private checkOperations(given: string[], allowed: string[], profileId: string, grant: CallerGrant): string[] {
    const ops = [...new Set(given)];
    const known = new Map(this.deps.tools.list.map((t) => [t.name, t]));
    const unknown = ops.filter((o) => !known.has(o));
    if (unknown.length) throw new ServiceError('INVALID_ARGUMENT', `proxyOperations: not tools of the catalog: ${unknown.join(', ')}`, { field: 'proxyOperations', operations: unknown });
    const never = ops.filter((o) => NEVER_PROXIED.has(o) || !((known.get(o)!.inputSchema.properties as Record<string, unknown> | undefined) ?? {}).workspaceId);
    if (never.length)
      throw new ServiceError('INVALID_ARGUMENT', `proxyOperations: these tools cannot be proxied by an agent (they do not act inside one workspace or act on the caller's session): ${never.join(', ')}`, { field: 'proxyOperations', operations: never });
    // Narrowed access binds what the caller sets in motion: an agent gets only tools its spawner may call itself.
    const denied = ops.map((o) => [o, grant.problem(o)] as const).filter(([, p]) => p !== null);
    if (denied.length)
      throw new ServiceError(
        'PERMISSION_DENIED',
        `proxyOperations: this caller may not call ${denied.map(([o]) => o).join(', ')} itself, so no agent it spawns may: ${denied.map(([, p]) => p).join('; ')}`,
        { field: 'proxyOperations', operations: denied.map(([o]) => o), rule: 'an agent may use only tools its spawner may call (toolsets, read-only, its own proxyOperations)' },
      );
    const allow = new Set(allowed);
    const outside = ops.filter((o) => !allow.has(o));
    if (outside.length)
      throw new ServiceError(
        'OWNER_APPROVAL_REQUIRED',
        `proxyOperations: outside the maxProxyOperations of profile ${profileId}: ${outside.join(', ')}; only the owner can widen them (dashboard), nothing was started`,
        { field: 'proxyOperations', operations: outside, maxProxyOperations: allowed },
      );
    return ops;
  }

  private async launch(live: Live): Promise<void> {
    const row = live.row;
    try {
      const delay = Number(process.env.ATELIER_TEST_AGENT_LAUNCH_DELAY_MS ?? 0);
      if (delay > 0) await sleep(Math.min(delay, 60_000));
      if (live.cancelRequested) return await this.finish(live, 'CANCELLED', { reason: live.cancelRequested });
      // The runtime: a pre-started idle one, or one started now (in parallel with the lease).
      const slot = this.pool.take();
      live.slot = slot;
      live.sandbox = slot.abort;
      live.servers = slot.servers;
      live.sockDir = slot.dir;
      this.mark(live, slot.isReady ? 'runtime_taken_ready' : 'runtime_taken_starting');
      // Agent rule 2: check the gateway once more right before the lease; unreachable there, the agent is cancelled and ends FAILED once the gateway confirms cleanup.
      let lease: Awaited<ReturnType<GatewayClient['issueLease']>>;
      this.mark(live, 'launch');
      const contextP = this.repositoryContext(row).then((c) => (this.mark(live, 'context'), c)).catch((e) => {
        this.log(live, { type: 'warning', message: `repository context not sent: ${(e as Error).message}` });
        return '';
      });
      try {
        lease = await this.deps.gateway.issueLease({
          agentId: row.id,
          profileId: row.profile_id,
          revision: row.revision,
          budgets: { maxInputTokens: live.budgets.maxInputTokens, maxOutputTokens: live.budgets.maxOutputTokens, maxCostMicros: live.budgets.maxCostMicros },
          expiresAt: new Date(live.deadlineMs + 30_000).toISOString(),
          ...(live.carveId ? { carveId: live.carveId } : {}),
        });
        live.carveId = null; // it is the lease now
      } catch (e) {
        if (e instanceof ServiceError && e.code === 'UNAVAILABLE') return await this.gatewayLost(live, e.message);
        return await this.finish(live, 'FAILED', { reason: `the lease was refused: ${(e as Error).message}`, error: toErrorBody(e) });
      }
      if (live.ending) {
        await this.deps.gateway.revokeLease(lease.leaseId).catch(() => null);
        return;
      }
      this.mark(live, 'lease');
      live.leaseId = lease.leaseId;
      this.deps.db.prepare('UPDATE agents SET lease_id = ? WHERE id = ?').run(lease.leaseId, row.id);
      live.row.lease_id = lease.leaseId;
      if (live.cancelRequested) return await this.finish(live, 'CANCELLED', { reason: live.cancelRequested });
      const context = await contextP;
      const ready = await Promise.race([slot.ready, sleep(SLOT_READY_MS).then(() => false)]);
      this.mark(live, 'runtime_ready');
      if (live.ending) return;
      if (!ready) {
        const tail = this.deps.environments.redact(slot.stderr.slice(-1500));
        return await this.finish(live, 'FAILED', { reason: `the agent runtime did not start${tail ? `: ${tail}` : ''}` });
      }
      if (live.cancelRequested) return await this.finish(live, 'CANCELLED', { reason: live.cancelRequested });
      // Assignment: the slot's sockets are named after the agent, its control messages and its gateway relay become this agent's.
      this.pool.rename(slot, live.id.slice(6, 22));
      live.sockDir = slot.dir;
      live.conn = slot.conn;
      slot.owner = {
        onMessage: (m) => void this.onRuntime(live, m).catch((e) => this.deps.log.error({ agentId: live.id, err: (e as Error).message }, 'agent control message failed')),
        relayOpen: () => !live.ending,
        onRelay: () => {
          if (live.marks.first_relay === undefined) {
            this.mark(live, 'first_relay');
            live.timers.push(setTimeout(() => this.releaseSlot(live), 150).unref());
            this.deps.log.debug({ agentId: live.id, ms: live.marks, runtime: { slot: slot.id, pooled: slot.warm, ...slot.readyTiming } }, 'agent launch timing');
          }
        },
      };
      const startedAt = new Date().toISOString();
      this.deps.db.prepare("UPDATE agents SET status = 'RUNNING', started_at = ? WHERE id = ? AND status = 'SPAWNING'").run(startedAt, row.id);
      live.row.status = 'RUNNING';
      this.log(live, { type: 'status', status: 'RUNNING', leaseId: lease.leaseId, runtime: { id: slot.id, pooled: slot.warm } });
      this.armTimers(live);
      const cfg: AgentStartConfig = {
        agentId: row.id,
        apiMode: row.api_mode,
        model: row.model,
        leaseToken: lease.token,
        prompt: row.prompt,
        context,
        tools: this.deps.tools.list.filter((t) => live.ops.has(t.name)).map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema })),
        toolResultCapBytes: TOOL_RESULT_CAP_BYTES,
        maxTurnOutputTokens: Math.min(live.budgets.maxOutputTokens, 8192),
        budget: await this.budgetView(live, leaseFigures(lease)),
        ...(live.span ? { traceparent: injectHeaders(live.span).traceparent } : {}),
      };
      live.exited = slot.exited.then(async (result) => {
        if (live.ending) return;
        if (result instanceof Error) return await this.finish(live, 'FAILED', { reason: `the agent sandbox failed: ${result.message}`, error: toErrorBody(result) });
        const tail = this.deps.environments.redact((result.stderr || slot.stderr).slice(-1500));
        await this.finish(live, 'FAILED', { reason: `the agent runtime exited (code ${result.exitCode}${result.signal ? `, signal ${result.signal}` : ''}) without ending the agent${tail ? `: ${tail}` : ''}` });
      });
      this.send(live, { t: 'job', config: cfg });
      this.mark(live, 'job_sent');
    } catch (e) {
      this.deps.log.error({ agentId: row.id, err: (e as Error).message }, 'agent launch failed');
      await this.finish(live, 'FAILED', { reason: `the agent could not start: ${(e as Error).message}`, error: toErrorBody(e) });
    }
  }

  /** Agent rule 2: cancelled at once; FAILED once the gateway answers again (and so confirms no lease of this agent routes). */
  private async gatewayLost(live: Live, why: string): Promise<void> {
    this.setStatus(live, 'CANCELLING', `the gateway was unreachable at the final check before the lease (${why})`);
    const until = live.deadlineMs;
    while (Date.now() < until) {
      try {
        await this.deps.gateway.status();
        break;
      } catch {
        await sleep(500);
      }
    }
    const confirmed = Date.now() < until;
    await this.finish(live, 'FAILED', {
      reason: `the gateway was unreachable at the final check before the lease was issued; ${confirmed ? 'it answered again and confirmed no lease of this agent exists' : 'it did not answer again within the agent TTL'}`,
      error: errorEnvelope(new ServiceError('UNAVAILABLE', why)).body.error,
    });
  }

  private async repositoryContext(row: Row): Promise<string> {
    if (row.repository_context === 'none') return '';
    const h = await this.deps.workspaces.activeHandle(row.workspace_id);
    const ov = (await this.deps.executor.request(h, 'overview', { root: '/workspace', clientProfile: row.repository_context as ClientProfile, include: ['instructions'], contentMode: 'excerpt', maxBytes: 32768 }, { timeoutMs: 15_000 })) as {
      instructions?: Array<{ path: string; excerpt?: string; truncated?: boolean }>;
    };
    return (ov.instructions ?? [])
      .map((f) => `--- ${f.path}${f.truncated ? ' (excerpt)' : ''} ---\n${f.excerpt ?? ''}`)
      .join('\n')
      .trim();
  }

  // ------------------------------------------------------------------ sandbox and sockets

  private armTimers(live: Live): void {
    const ttlMs = live.budgets.ttlSeconds * 1000;
    // The runtime is asked to stop and summarise a little before the TTL, so the summary fits in it; the TTL itself is hard.
    const reserve = Math.min(30_000, Math.max(5_000, Math.floor(ttlMs * 0.1)));
    const left = live.deadlineMs - Date.now();
    live.timers.push(
      setTimeout(() => this.send(live, { t: 'stop', status: 'TIMED_OUT', reason: `ttlSeconds (${live.budgets.ttlSeconds}) is running out` }), Math.max(0, left - reserve)),
      setTimeout(() => void this.finish(live, 'TIMED_OUT', { reason: `ttlSeconds (${live.budgets.ttlSeconds}) ran out`, drainMs: 0 }), Math.max(0, left)),
    );
    for (const t of live.timers) t.unref();
  }

  private send(live: Live, runnerMessage: RunnerMessage): void {
    const s = live.conn;
    if (s && !s.destroyed) s.write(JSON.stringify(runnerMessage) + '\n');
  }

  private async onRuntime(live: Live, runtimeMessage: RuntimeMessage): Promise<void> {
    switch (runtimeMessage.t) {
      case 'hello':
        this.mark(live, 'hello');
        // The pool refills once this agent's first model request is on its way (or after a bound): starting a runtime beside it would slow that request.
        live.timers.push(setTimeout(() => this.releaseSlot(live), 3_000).unref());
        for (const s of live.pendingSteers.splice(0)) this.deliverSteer(live, s);
        return;
      case 'event': {
        const event: Record<string, unknown> = runtimeMessage.event && typeof runtimeMessage.event === 'object' ? { ...runtimeMessage.event } : { type: 'event' };
        // A turn: its span (the id the runtime chose and sent to the gateway as the parent of the model request).
        const spanId = event.spanId;
        delete event.spanId;
        if (event.type === 'turn') this.turnSpan(live, typeof spanId === 'string' ? spanId : undefined, Number(event.turn) || 0);
        this.log(live, event);
        return;
      }
      case 'budget':
        this.send(live, { t: 'budget', id: runtimeMessage.id, budget: await this.budgetView(live) });
        return;
      case 'call': {
        // The proxied call's span hangs from the turn that asked for it.
        const result = await withSpanContext(live.turnSpan ?? live.span, () => this.proxyCall(live, String(runtimeMessage.name), runtimeMessage.args && typeof runtimeMessage.args === 'object' && !Array.isArray(runtimeMessage.args) ? runtimeMessage.args : {}));
        this.send(live, { t: 'result', id: runtimeMessage.id, result });
        return;
      }
      case 'final': {
        if (live.ending) return;
        if (live.followUps.length) {
          const messages = live.followUps.splice(0);
          this.log(live, { type: 'followup_delivered', count: messages.length });
          this.send(live, { t: 'continue', messages });
          return;
        }
        if (live.steersSent > (Number(runtimeMessage.steersSeen) || 0)) {
          this.send(live, { t: 'continue', messages: [] });
          return;
        }
        this.send(live, { t: 'end' });
        await this.finish(live, 'SUCCEEDED', { summary: String(runtimeMessage.text ?? ''), reason: 'the model answered without tool calls' });
        return;
      }
      case 'ended': {
        const st = (['LIMIT_EXCEEDED', 'TIMED_OUT', 'FAILED', 'CANCELLED'] as const).includes(runtimeMessage.status) ? runtimeMessage.status : 'FAILED';
        await this.finish(live, live.cancelRequested ? 'CANCELLED' : st, { summary: String(runtimeMessage.summary ?? ''), reason: String(runtimeMessage.reason ?? '') });
        return;
      }
    }
  }

  private async proxyCall(live: Live, name: string, raw: Record<string, unknown>): Promise<{ isError?: boolean; text: string }> {
    const refuse = (code: 'PERMISSION_DENIED' | 'FAILED_PRECONDITION', message: string) => {
      this.log(live, { type: 'tool_refused', name, code, message });
      return { isError: true, text: JSON.stringify(errorEnvelope(new ServiceError(code, message, { tool: name })).body) };
    };
    if (live.ending) return refuse('FAILED_PRECONDITION', 'the agent is ending');
    if (!live.ops.has(name)) return refuse('PERMISSION_DENIED', `tool ${name} is not among this agent's proxyOperations (${[...live.ops].join(', ') || 'none'})`);
    const args = { ...raw };
    if (args.workspaceId !== undefined && args.workspaceId !== live.row.workspace_id)
      return refuse('PERMISSION_DENIED', `workspaceId: this agent may act on its own workspace only (${live.row.workspace_id})`);
    args.workspaceId = live.row.workspace_id;
    if (name === 'agent_spawn') {
      if (args.parentAgentId !== undefined && args.parentAgentId !== live.id) return refuse('PERMISSION_DENIED', `parentAgentId: an agent spawns its own children only (${live.id})`);
      args.parentAgentId = live.id;
    }
    this.log(live, { type: 'tool_call', name, args: clip(JSON.stringify(args), 2048) });
    const ac = new AbortController();
    live.calls.add(ac);
    const started = Date.now();
    try {
      // Checked as a direct call with the spawner's access would be, limited to this agent's operations.
      const res = await this.deps.tools.call(name, args, { principal: live.row.principal, actor: live.id as Actor, signal: ac.signal, access: live.access, operations: live.ops });
      const text = res.structuredContent ? JSON.stringify(res.structuredContent) : res.content.map((c) => c.text).join('\n');
      this.log(live, { type: 'tool_result', name, isError: res.isError === true, bytes: Buffer.byteLength(text), ms: Date.now() - started, head: clip(text, 300) });
      return { isError: res.isError === true, text };
    } finally {
      live.calls.delete(ac);
    }
  }

  private async budgetView(live: Live, fresh?: LeaseInfo): Promise<BudgetView> {
    let leaseInfo: LeaseInfo | null = fresh ?? live.lastLease;
    if (live.leaseId && !fresh) leaseInfo = (await this.deps.gateway.leaseInfo(live.leaseId).catch(() => null)) ?? leaseInfo;
    live.lastLease = leaseInfo;
    const agentBudgets = live.budgets;
    const used = leaseInfo?.used ?? { inputTokens: 0, outputTokens: 0, costMicros: 0 };
    const res = leaseInfo?.reserved ?? { inputTokens: 0, outputTokens: 0, costMicros: 0 };
    const costBudget = leaseInfo?.budgets.maxCostMicros ?? agentBudgets.maxCostMicros; // after carving children out
    const fig = (budget: number, u: number, r: number) => ({ budget, used: u, reserved: r, remaining: Math.max(0, budget - u - r) });
    return {
      inputTokens: fig(leaseInfo?.budgets.maxInputTokens ?? agentBudgets.maxInputTokens, used.inputTokens, res.inputTokens),
      outputTokens: fig(leaseInfo?.budgets.maxOutputTokens ?? agentBudgets.maxOutputTokens, used.outputTokens, res.outputTokens),
      costMicros: fig(costBudget, used.costMicros, res.costMicros),
      outputBytes: { budget: agentBudgets.maxOutputBytes, used: live.logBytes, remaining: Math.max(0, agentBudgets.maxOutputBytes - live.logBytes) },
      ttlSeconds: { budget: agentBudgets.ttlSeconds, remaining: Math.max(0, Math.floor((live.deadlineMs - Date.now()) / 1000)) },
    };
  }

  private releaseSlot(live: Live): void {
    if (live.slot && !live.released) {
      live.released = true;
      this.pool.release();
    }
  }

  private mark(live: Live, what: string): void {
    live.marks[what] = Math.round((performance.now() - live.t0) * 10) / 10;
  }

  private deliverSteer(live: Live, message: string): void {
    live.steersSent++;
    this.send(live, { t: 'steer', message });
  }

  // ------------------------------------------------------------------ ending

  private setStatus(live: Live, status: AgentStatus, reason: string): void {
    this.deps.db.prepare(`UPDATE agents SET status = ?, end_reason = COALESCE(end_reason, ?) WHERE id = ?`).run(status, reason, live.id);
    live.row.status = status;
    this.log(live, { type: 'status', status, reason });
  }

  /**
   * Ends an agent (once): lets the runtime drain for a bound, kills its sandbox, aborts proxied
   * calls in flight, revokes the lease (requests in flight settle), pulls usage into the ledger,
   * gives the unspent part of a child's carved budget back to its parent, then records the status.
   */
  /** Ends the current turn's span and starts the next one (a child of the run's span, with the id the runtime chose). */
  private turnSpan(live: Live, spanId: string | undefined, turn: number): void {
    live.turnSpan?.end();
    live.turnSpan = live.span ? startSpan('agent turn', { parent: contextOf(live.span), spanId, attributes: { 'gen_ai.agent.id': live.id, 'atelier.agent.turn': turn } }) : undefined;
  }

  private finish(live: Live, status: AgentStatus, options: { summary?: string; reason?: string; error?: unknown; drainMs?: number }): Promise<void> {
    if (live.ending) return live.ending;
    live.ending = (async () => {
      try {
        await this.finishing(live, status, options);
      } finally {
        live.turnSpan?.end();
        if (live.span) {
          setAttrs(live.span, { 'atelier.agent.status': status });
          if (status !== 'SUCCEEDED') failSpan(live.span, null, status);
          live.span.end();
        }
      }
    })();
    return live.ending;
  }

  private async finishing(live: Live, status: AgentStatus, options: { summary?: string; reason?: string; error?: unknown; drainMs?: number }): Promise<void> {
    {
      this.releaseSlot(live);
      for (const t of live.timers) clearTimeout(t);
      if (status === 'CANCELLED' && live.row.status !== 'CANCELLING') this.setStatus(live, 'CANCELLING', options.reason ?? 'cancelled');
      if (live.exited) {
        const drain = options.drainMs ?? DRAIN_MS;
        if (drain > 0) await Promise.race([live.exited, sleep(drain)]);
        live.sandbox.abort();
        await Promise.race([live.exited, sleep(5_000)]);
      } else {
        live.sandbox.abort();
        if (live.slot) await Promise.race([live.slot.exited, sleep(5_000)]);
      }
      for (const ac of live.calls) ac.abort();
      let info: LeaseInfo | null = null;
      if (live.leaseId) {
        info = await this.deps.gateway.revokeLease(live.leaseId).catch(() => null);
        if (!info) info = live.lastLease;
        await this.deps.gateway.syncUsage().catch(() => undefined);
      }
      // A carve whose child never got a lease goes back up the tree. What a lease leaves goes back by
      // itself at the gateway once it is revoked and idle (never computed here: docs/agents.md "Trees").
      if (live.carveId) {
        const carveId = live.carveId;
        live.carveId = null;
        await this.deps.gateway.releaseCarve(carveId).catch(() => false);
      }
      for (const s of live.servers) s.close();
      live.conn?.destroy();
      if (live.sockDir) rmSync(live.sockDir, { recursive: true, force: true });
      const summary = options.summary ? this.deps.environments.redact(options.summary).slice(0, 65_536) : null;
      const used = info ? { used: info.used, reserved: info.reserved, budgets: info.budgets } : null;
      this.deps.db
        .prepare('UPDATE agents SET status = ?, summary = COALESCE(?, summary), end_reason = ?, error_json = ?, used_json = COALESCE(?, used_json), log_bytes = ?, ended_at = ? WHERE id = ?')
        .run(status, summary, options.reason ?? null, options.error ? JSON.stringify(options.error) : null, used ? JSON.stringify(used) : null, live.logBytes, new Date().toISOString(), live.id);
      live.row.status = status;
      this.appendRaw(live.id, { type: 'status', status, reason: options.reason ?? null, ...(summary ? { summary: clip(summary, 4096) } : {}) });
      this.live.delete(live.id);
      this.deps.log.info({ agentId: live.id, status }, 'agent ended');
      // A tree ends with its parent: children still live when their parent ends (other than by a
      // cancel, which already cascades, or a runner stop, which ends them all) are cancelled.
      if (status !== 'CANCELLED' && status !== 'INTERRUPTED') {
        const children = [...this.live.values()].filter((l) => l.row.parent_id === live.id && !l.ending);
        for (const c of children) void this.cancelTree(this.row(c.id), `its parent agent ${live.id} ended ${status} while it ran; a tree ends with its parent`, live.id).catch((e) => this.deps.log.error({ agentId: c.id, err: (e as Error).message }, 'cancelling the children of an ended agent failed'));
      }
    }
  }

  // ------------------------------------------------------------------ logs

  private logFile(id: string): string {
    return join(this.logDir, `${id}.log`);
  }

  /** Appends one event line (redacted, clipped); past maxOutputBytes nothing more is logged and the agent is stopped. */
  private log(live: Live, event: Record<string, unknown>): void {
    if (live.outputCapped) return;
    const line = this.line(live.id, event);
    if (live.logBytes + Buffer.byteLength(line) > live.budgets.maxOutputBytes) {
      live.outputCapped = true;
      this.appendRaw(live.id, { type: 'output_limit', maxOutputBytes: live.budgets.maxOutputBytes, message: 'maxOutputBytes reached: nothing more of this agent is logged' });
      if (live.conn) this.send(live, { t: 'stop', status: 'LIMIT_EXCEEDED', reason: `maxOutputBytes (${live.budgets.maxOutputBytes}) reached` });
      else void this.finish(live, 'LIMIT_EXCEEDED', { reason: `maxOutputBytes (${live.budgets.maxOutputBytes}) reached` });
      // The runtime gets a bounded time to summarise.
      const t = setTimeout(() => void this.finish(live, 'LIMIT_EXCEEDED', { reason: `maxOutputBytes (${live.budgets.maxOutputBytes}) reached` }), 30_000);
      t.unref();
      live.timers.push(t);
      return;
    }
    mkdirSync(this.logDir, { recursive: true, mode: 0o700 });
    appendFileSync(this.logFile(live.id), line, { mode: 0o600 });
    live.logBytes += Buffer.byteLength(line);
  }

  private line(id: string, event: Record<string, unknown>): string {
    let text = JSON.stringify(this.deps.environments.redact({ at: new Date().toISOString(), agentId: id, ...event }));
    if (text.length > MAX_LOG_LINE) text = JSON.stringify({ at: new Date().toISOString(), agentId: id, type: String(event.type ?? 'event'), clipped: true, text: clip(text, MAX_LOG_LINE - 200) });
    return text + '\n';
  }

  /** Status lines: written whatever the output cap (bounded). */
  private appendRaw(id: string, event: Record<string, unknown>): void {
    mkdirSync(this.logDir, { recursive: true, mode: 0o700 });
    appendFileSync(this.logFile(id), this.line(id, event), { mode: 0o600 });
  }

  // ------------------------------------------------------------------ queries

  private row(id: string): Row {
    const r = this.deps.db.prepare('SELECT * FROM agents WHERE id = ?').get(id) as Row | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `agentId: no agent ${id}`, { field: 'agentId' });
    return r;
  }

  /** The agent as the caller may see it: in the caller's workspace, and for an agent caller only its own descendants. */
  private visible(id: string, agentCaller: AgentCaller, field = 'agentId'): Row {
    let row: Row;
    try {
      row = this.row(id);
    } catch {
      throw new ServiceError('NOT_FOUND', `${field}: no agent ${id}`, { field });
    }
    if (row.workspace_id !== agentCaller.workspace) throw new ServiceError('NOT_FOUND', `${field}: no agent ${id} in workspace ${agentCaller.workspace}`, { field });
    if (agentCaller.actor.startsWith('agent_') && !this.isDescendant(row, agentCaller.actor)) throw new ServiceError('NOT_FOUND', `${field}: no agent ${id} among this agent's descendants`, { field });
    return row;
  }

  /**
   * Narrowed access binds what a caller steers: it reaches (messages, cancels, reads the log of)
   * only an agent it could have spawned itself, one whose every operation it may call. (The
   * agent's children have operations within the agent's, so the rule covers the whole subtree.)
   */
  private reachable(row: Row, agentCaller: AgentCaller, what: string): void {
    const g = agentCaller.grant;
    if (g.unnarrowed) return;
    const denied = (JSON.parse(row.proxy_ops_json) as string[]).filter((o) => g.problem(o) !== null);
    if (denied.length)
      throw new ServiceError(
        'PERMISSION_DENIED',
        `agentId: this caller may not ${what} agent ${row.id}: it could not have spawned it (its operations ${denied.join(', ')} are outside this caller's access: ${describeAccess(g.access)}${g.operations ? ` and proxyOperations ${[...g.operations].join(', ')}` : ''})`,
        { field: 'agentId', operations: denied, rule: 'a caller reaches only agents it could have spawned' },
      );
  }

  private isDescendant(row: Row, ancestor: string): boolean {
    let cur: Row | undefined = row;
    for (let i = 0; cur && cur.parent_id && i < 1000; i++) {
      if (cur.parent_id === ancestor) return true;
      cur = this.deps.db.prepare('SELECT * FROM agents WHERE id = ?').get(cur.parent_id) as Row | undefined;
    }
    return false;
  }

  private descendants(id: string): Row[] {
    return this.deps.db
      .prepare(
        `WITH RECURSIVE t(id) AS (SELECT id FROM agents WHERE parent_id = ? UNION ALL SELECT a.id FROM agents a JOIN t ON a.parent_id = t.id)
         SELECT agents.* FROM agents JOIN t ON agents.id = t.id ORDER BY depth DESC, seq`,
      )
      .all(id) as Row[];
  }

  private async view(row: Row, withLive = true): Promise<Record<string, unknown>> {
    const agentBudgets = JSON.parse(row.budgets_json) as AgentBudgets;
    const live = this.live.get(row.id);
    let lease: { used: LeaseInfo['used']; reserved: LeaseInfo['reserved']; budgets: LeaseInfo['budgets'] } | null = row.used_json ? JSON.parse(row.used_json) : null;
    if (live?.leaseId && withLive) {
      const l = (await this.deps.gateway.leaseInfo(live.leaseId).catch(() => null)) ?? live.lastLease;
      if (l) {
        live.lastLease = l;
        lease = l;
      }
    }
    const used = lease?.used ?? { inputTokens: 0, outputTokens: 0, costMicros: 0 };
    const reserved = lease && !TERMINAL.has(row.status) ? lease.reserved : { inputTokens: 0, outputTokens: 0, costMicros: 0 };
    const carved = this.deps.db.prepare('SELECT COALESCE(SUM(carved_micros), 0) AS cost, COALESCE(SUM(carved_input_tokens), 0) AS input, COALESCE(SUM(carved_output_tokens), 0) AS output FROM agents WHERE parent_id = ?').get(row.id) as { cost: number; input: number; output: number };
    const carvedToChildren = carved.cost;
    const fig = (budget: number, u: number, res: number) => ({ budget, used: u, reserved: res, remaining: TERMINAL.has(row.status) ? 0 : Math.max(0, budget - u - res) });
    const costRoom = lease?.budgets.maxCostMicros ?? agentBudgets.maxCostMicros;
    const logBytes = live ? live.logBytes : row.log_bytes;
    const ended = row.ended_at ? Date.parse(row.ended_at) : Date.now();
    return {
      agentId: row.id,
      status: row.status,
      workspaceId: row.workspace_id,
      parentAgentId: row.parent_id,
      rootAgentId: row.root_id,
      depth: row.depth,
      profileId: row.profile_id,
      revision: row.revision,
      credentialId: row.credential_id,
      model: row.model,
      apiMode: row.api_mode,
      proxyOperations: JSON.parse(row.proxy_ops_json),
      leaseId: row.lease_id,
      repositoryContext: row.repository_context,
      spawnedBy: row.spawned_by,
      idempotencyKey: row.idempotency_key,
      createdAt: row.created_at,
      startedAt: row.started_at,
      endedAt: row.ended_at,
      expiresAt: row.expires_at,
      budgets: {
        ttlSeconds: { budget: agentBudgets.ttlSeconds, elapsedSeconds: Math.max(0, Math.floor((ended - Date.parse(row.created_at)) / 1000)), remaining: TERMINAL.has(row.status) ? 0 : Math.max(0, Math.floor((Date.parse(row.expires_at) - Date.now()) / 1000)) },
        maxOutputBytes: { budget: agentBudgets.maxOutputBytes, used: logBytes, remaining: TERMINAL.has(row.status) ? 0 : Math.max(0, agentBudgets.maxOutputBytes - logBytes) },
        maxInputTokens: { ...fig(agentBudgets.maxInputTokens, used.inputTokens, reserved.inputTokens), carvedToChildren: carved.input, remaining: TERMINAL.has(row.status) ? 0 : Math.max(0, (lease?.budgets.maxInputTokens ?? agentBudgets.maxInputTokens) - used.inputTokens - reserved.inputTokens) },
        maxOutputTokens: { ...fig(agentBudgets.maxOutputTokens, used.outputTokens, reserved.outputTokens), carvedToChildren: carved.output, remaining: TERMINAL.has(row.status) ? 0 : Math.max(0, (lease?.budgets.maxOutputTokens ?? agentBudgets.maxOutputTokens) - used.outputTokens - reserved.outputTokens) },
        maxCostMicros: { ...fig(agentBudgets.maxCostMicros, used.costMicros, reserved.costMicros), carvedToChildren, remaining: TERMINAL.has(row.status) ? 0 : Math.max(0, costRoom - used.costMicros - reserved.costMicros) },
      },
      spend: { ...this.deps.spend.agentSpend(row.id), unit: 'micro-USD', estimate: true },
      terminal: TERMINAL.has(row.status),
      summary: row.summary,
      endReason: row.end_reason,
      error: row.error_json ? JSON.parse(row.error_json) : null,
      cancelReason: row.cancel_reason,
    };
  }

  async status(args: { agentId?: string; idempotencyKey?: string }, agentCaller: AgentCaller): Promise<Record<string, unknown>> {
    if (!args.agentId && !args.idempotencyKey) throw new ServiceError('INVALID_ARGUMENT', 'agentId or idempotencyKey: give one of them', { field: 'agentId' });
    let row: Row;
    if (args.agentId) {
      row = this.visible(args.agentId, agentCaller);
      if (args.idempotencyKey && row.idempotency_key !== args.idempotencyKey)
        throw new ServiceError('INVALID_ARGUMENT', `idempotencyKey: agent ${args.agentId} was not spawned with this key`, { field: 'idempotencyKey' });
    } else {
      const found = this.deps.db.prepare('SELECT id FROM agents WHERE idempotency_key = ? AND workspace_id = ? ORDER BY seq DESC LIMIT 1').pluck().get(args.idempotencyKey, agentCaller.workspace) as string | undefined;
      if (!found) throw new ServiceError('NOT_FOUND', `idempotencyKey: no agent spawned with this key in workspace ${agentCaller.workspace}`, { field: 'idempotencyKey' });
      row = this.visible(found, agentCaller, 'idempotencyKey');
    }
    return this.view(row);
  }

  logs(args: { agentId: string; cursor?: string; limitBytes: number }, agentCaller: AgentCaller): Record<string, unknown> {
    const row = this.visible(args.agentId, agentCaller);
    this.reachable(row, agentCaller, 'read the log of');
    const file = this.logFile(row.id);
    const size = existsSync(file) ? statSync(file).size : 0;
    const start = args.cursor === undefined ? 0 : Number(args.cursor);
    if (!Number.isSafeInteger(start) || start < 0) throw new ServiceError('INVALID_ARGUMENT', 'cursor: must be a decimal byte offset from a previous page', { field: 'cursor' });
    if (start > size) throw new ServiceError('INVALID_ARGUMENT', `cursor: ${start} is past the end of the log (${size} bytes)`, { field: 'cursor', size });
    let buf = Buffer.alloc(0);
    if (size > start) {
      const fd = openSync(file, 'r');
      try {
        buf = Buffer.alloc(Math.min(args.limitBytes, size - start));
        const n = readSync(fd, buf, 0, buf.length, start);
        buf = buf.subarray(0, n);
      } finally {
        closeSync(fd);
      }
      if (start + buf.length < size) {
        // Whole lines when one fits; otherwise cut on a UTF-8 character boundary.
        const nl = buf.lastIndexOf(0x0a);
        if (nl >= 0) buf = buf.subarray(0, nl + 1);
        else {
          let end = buf.length;
          while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
          buf = buf.subarray(0, end);
        }
      }
    }
    const next = start + buf.length;
    const terminal = TERMINAL.has(row.status);
    return {
      agentId: row.id,
      status: row.status,
      cursor: String(start),
      nextCursor: String(next),
      text: buf.toString('utf8'),
      bytes: buf.length,
      totalBytes: size,
      eof: next >= size,
      complete: terminal && next >= size,
      format: 'one JSON event per line',
    };
  }

  message(args: { agentId: string; mode: 'steer' | 'followUp'; message: string }, agentCaller: AgentCaller): Record<string, unknown> {
    const row = this.visible(args.agentId, agentCaller);
    this.reachable(row, agentCaller, 'message');
    const live = this.live.get(row.id);
    if (TERMINAL.has(row.status) || row.status === 'CANCELLING' || !live || live.ending)
      throw new ServiceError('FAILED_PRECONDITION', `agentId: agent ${row.id} is ${live?.ending && !TERMINAL.has(row.status) ? 'ending' : row.status}; messages go to a SPAWNING or RUNNING agent only`, { field: 'agentId', status: row.status });
    const message = args.message;
    if (args.mode === 'steer') {
      if (live.conn) this.deliverSteer(live, message);
      else live.pendingSteers.push(message);
    } else live.followUps.push(message);
    this.log(live, { type: 'message_received', mode: args.mode, from: agentCaller.actor, message: clip(message, 4096) });
    return { agentId: row.id, mode: args.mode, accepted: true, status: live.row.status, delivery: args.mode === 'steer' ? 'at the next turn boundary' : 'when the agent would otherwise end' };
  }

  async cancel(args: { agentId: string; reason?: string }, agentCaller: AgentCaller): Promise<Record<string, unknown>> {
    const r = this.visible(args.agentId, agentCaller);
    this.reachable(r, agentCaller, 'cancel');
    return this.cancelTree(r, args.reason ?? `cancelled by ${agentCaller.actor}`, agentCaller.actor);
  }

  private async cancelTree(row: Row, reason: string, by: string): Promise<Record<string, unknown>> {
    const targets = [...this.descendants(row.id), row]; // leaves first
    const cancelled: string[] = [];
    const alreadyEnded: Array<{ agentId: string; status: AgentStatus }> = [];
    const ends: Promise<void>[] = [];
    for (const targetRow of targets) {
      const live = this.live.get(targetRow.id);
      if (TERMINAL.has(targetRow.status) || !live) {
        if (TERMINAL.has(targetRow.status)) alreadyEnded.push({ agentId: targetRow.id, status: targetRow.status });
        continue;
      }
      cancelled.push(targetRow.id);
      this.deps.db.prepare('UPDATE agents SET cancel_reason = COALESCE(cancel_reason, ?) WHERE id = ?').run(clip(reason, 2000), targetRow.id);
      if (!live.cancelRequested) live.cancelRequested = reason;
      if (live.row.status !== 'CANCELLING' && !live.ending) this.setStatus(live, 'CANCELLING', `cancelled: ${clip(reason, 500)}`);
      this.send(live, { t: 'cancel', reason });
      if (live.ending) ends.push(live.ending);
      else if (live.exited || live.row.status === 'CANCELLING') ends.push(this.finish(live, 'CANCELLED', { reason: `cancelled by ${by}: ${clip(reason, 500)}` }));
    }
    await Promise.race([Promise.all(ends), sleep(DRAIN_MS + 10_000)]);
    // SPAWNING agents notice cancelRequested at their next launch step.
    for (const id of cancelled) {
      const l = this.live.get(id);
      if (l && !l.ending && !l.exited) await Promise.race([new Promise<void>((res) => { const iv = setInterval(() => { if (!this.live.has(id)) { clearInterval(iv); res(); } }, 50); iv.unref(); }), sleep(10_000)]);
    }
    const statuses = Object.fromEntries(targets.map((t) => [t.id, this.row(t.id).status]));
    return { agentId: row.id, status: this.row(row.id).status, cancelled, alreadyEnded, statuses, reason: clip(reason, 2000) };
  }

  async list(args: { parentAgentId?: string; status?: AgentStatus; cursor?: string; limit: number }, agentCaller: AgentCaller): Promise<Record<string, unknown>> {
    let parent = args.parentAgentId;
    if (agentCaller.actor.startsWith('agent_')) {
      if (parent && parent !== agentCaller.actor) this.visible(parent, agentCaller, 'parentAgentId');
      parent = parent ?? agentCaller.actor;
    } else if (parent) this.visible(parent, agentCaller, 'parentAgentId');
    const after = args.cursor ? Number(args.cursor) : 0;
    const where = ['workspace_id = ?', 'seq > ?'];
    const params: unknown[] = [agentCaller.workspace, after];
    if (parent) {
      where.push('parent_id = ?');
      params.push(parent);
    }
    if (args.status) {
      where.push('status = ?');
      params.push(args.status);
    }
    const rows = this.deps.db.prepare(`SELECT * FROM agents WHERE ${where.join(' AND ')} ORDER BY seq LIMIT ?`).all(...params, args.limit + 1) as Row[];
    const page = rows.slice(0, args.limit);
    const agents = await Promise.all(page.map((r) => this.brief(r)));
    return { agents, nextCursor: rows.length > args.limit ? String(page.at(-1)!.seq) : null };
  }

  private brief(row: Row): Record<string, unknown> {
    return {
      agentId: row.id,
      status: row.status,
      parentAgentId: row.parent_id,
      rootAgentId: row.root_id,
      depth: row.depth,
      profileId: row.profile_id,
      revision: row.revision,
      model: row.model,
      prompt: clip(row.prompt, 200),
      createdAt: row.created_at,
      endedAt: row.ended_at,
      summary: row.summary ? clip(row.summary, 500) : null,
    };
  }

  // ------------------------------------------------------------------ owner's view (dashboard REST)

  /** Every agent (newest first, at most `limit`), with its tree links, status, budgets and spend. */
  async ownerList(options: { status?: string; workspaceId?: string; limit?: number } = {}): Promise<Record<string, unknown>> {
    const where: string[] = [];
    const params: unknown[] = [];
    if (options.status) {
      if (!(AGENT_STATUSES as readonly string[]).includes(options.status)) throw new ServiceError('INVALID_ARGUMENT', `status: one of ${AGENT_STATUSES.join(', ')}`, { field: 'status' });
      where.push('status = ?');
      params.push(options.status);
    }
    if (options.workspaceId) {
      where.push('workspace_id = ?');
      params.push(options.workspaceId);
    }
    const limit = options.limit ?? 200;
    const rows = this.deps.db.prepare(`SELECT * FROM agents ${where.length ? 'WHERE ' + where.join(' AND ') : ''} ORDER BY seq DESC LIMIT ?`).all(...params, limit) as Row[];
    const agents = await Promise.all(rows.map((r) => this.view(r)));
    const counts = Object.fromEntries((this.deps.db.prepare('SELECT status, COUNT(*) n FROM agents GROUP BY status').all() as Array<{ status: string; n: number }>).map((x) => [x.status, x.n]));
    return { agents, counts, live: this.live.size, pool: this.poolStats() };
  }

  /** The owner's view of an agent's log: its last `limitBytes` bytes, whole lines, secrets redacted. */
  ownerLogTail(id: string, limitBytes = 8192): Record<string, unknown> {
    const result = this.deps.db.prepare('SELECT id, status FROM agents WHERE id = ?').get(id) as { id: string; status: string } | undefined;
    if (!result) throw new ServiceError('NOT_FOUND', `no agent ${id}`, { field: 'id' });
    const file = this.logFile(result.id);
    const size = existsSync(file) ? statSync(file).size : 0;
    const start = Math.max(0, size - limitBytes);
    let buf = Buffer.alloc(0);
    if (size > 0) {
      const fd = openSync(file, 'r');
      try {
        buf = Buffer.alloc(size - start);
        buf = buf.subarray(0, readSync(fd, buf, 0, buf.length, start));
      } finally {
        closeSync(fd);
      }
      // Start at a whole line when the tail cut one.
      if (start > 0) {
        const nl = buf.indexOf(0x0a);
        if (nl >= 0) buf = buf.subarray(nl + 1);
      }
    }
    return { agentId: result.id, status: result.status, size, tail: this.deps.environments.redact(buf.toString('utf8')) };
  }

  async ownerCancel(id: string, reason?: string): Promise<Record<string, unknown>> {
    if (!/^agent_[A-Za-z0-9_-]{20,80}$/.test(id)) throw new ServiceError('INVALID_ARGUMENT', 'agentId: an agent_ identifier', { field: 'agentId' });
    if (reason !== undefined && (typeof reason !== 'string' || reason.length > 2000)) throw new ServiceError('INVALID_ARGUMENT', 'reason: a string of at most 2000 characters', { field: 'reason' });
    const r = this.row(id);
    const out = await this.cancelTree(r, reason ?? 'cancelled by the owner on the dashboard', 'dashboard');
    this.deps.audit.record({ actor: 'dashboard', action: 'agent_cancel', target: id, outcome: 'ok', details: { cancelled: out.cancelled } });
    return out;
  }

  /** Profile revisions pinned by live agents (kept in the gateway snapshot until they end, agent rule 3). */
  pins(): Array<{ profileId: string; revision: number }> {
    return [...this.live.values()].map((l) => ({ profileId: l.row.profile_id, revision: l.row.revision }));
  }

  /** For tests and the dashboard: live agents in this process. */
  liveCount(): number {
    return this.live.size;
  }
}

/** The access an agent's tree was spawned with (rows from before it was kept: full access). */
function accessOf(row: Row): Access {
  if (!row.access_json) return FULL_ACCESS;
  try {
    const a = JSON.parse(row.access_json) as Access;
    return { toolsets: Array.isArray(a.toolsets) ? a.toolsets : null, readOnly: a.readOnly === true };
  } catch {
    return { toolsets: [], readOnly: true };
  }
}

/** A lease answer without its token (kept as the last known figures). */
function leaseFigures(line: LeaseInfo & { token?: string; gatewayUrl?: string }): LeaseInfo {
  const { token: _token, gatewayUrl: _url, ...info } = line;
  return info as LeaseInfo;
}

function clip(text: string, limit: number): string {
  return text.length <= limit ? text : `${text.slice(0, limit)}… [${text.length - limit} more characters]`;
}

