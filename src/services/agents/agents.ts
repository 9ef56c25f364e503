/**
 * Coding subagents (issue #14): the runner's agent service. AgentService is this module's class on
 * two others: views.ts (AgentViews: what the agent_* tools and the dashboard read) on supervisor.ts
 * (AgentSupervisor: a running agent's sandbox, runtime messages, proxied calls, budgets, its end);
 * records.ts has the rows and arguments. Here: spawn, cancel, message, start and shutdown. Owns the agents table
 * and the per-agent logs under <dataDir>/state/agents/. Each agent runs the agent runtime
 * (src/agent/runtime.ts) in a short-lived bubblewrap sandbox of its own (no network, no workspace
 * files) with two Unix sockets bound in: one relayed to the gateway's agent endpoint, one to this
 * supervisor (proxied tool calls through the same tool registry as MCP calls, events, budgets,
 * messages). The supervisor ends agents on TTL, budget, output bytes, cancel (cascading down the
 * tree) or runtime exit, revokes their leases and settles their spend. See docs/agents.md.
 */
import { startSpan } from '../../telemetry/tracing.js';
import { mkdirSync, rmSync } from 'node:fs';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import type { CallerGrant } from '../../core/caller.js';
import { describeAccess, intersect } from '../../core/toolsets.js';
import { AgentBudgets, AgentCaller, CARVED_FIELDS, CARVED_MIN, CARVE_TRIES, CarvedField, LIVE_STATUSES, Live, NEVER_PROXIED, Row, SPAWN_BUDGET_DEFAULTS, SpawnArgs, TERMINAL, accessOf, clip } from './records.js';
export { AGENT_STATUSES, DRAIN_MS, NEVER_PROXIED, SPAWN_BUDGET_DEFAULTS, TOOL_RESULT_CAP_BYTES, type AgentBudgets, type AgentCaller, type AgentStatus, type SpawnArgs, type ToolGateway } from './records.js';
export type { AgentStatusResult, AgentLogsResult, AgentListResult, AgentOwnerListResult, AgentOwnerLogTailResult } from './views.js';
import { AgentViews } from './views.js';

export class AgentService extends AgentViews {
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

  async spawn(spawnArgs: SpawnArgs, agentCaller: AgentCaller) {
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

  message(args: { agentId: string; mode: 'steer' | 'followUp'; message: string }, agentCaller: AgentCaller) {
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

  async cancel(args: { agentId: string; reason?: string }, agentCaller: AgentCaller) {
    const r = this.visible(args.agentId, agentCaller);
    this.reachable(r, agentCaller, 'cancel');
    return this.cancelTree(r, args.reason ?? `cancelled by ${agentCaller.actor}`, agentCaller.actor);
  }

  async ownerCancel(id: string, reason?: string) {
    if (!/^agent_[A-Za-z0-9_-]{20,80}$/.test(id)) throw new ServiceError('INVALID_ARGUMENT', 'agentId: an agent_ identifier', { field: 'agentId' });
    if (reason !== undefined && (typeof reason !== 'string' || reason.length > 2000)) throw new ServiceError('INVALID_ARGUMENT', 'reason: a string of at most 2000 characters', { field: 'reason' });
    const r = this.row(id);
    const out = await this.cancelTree(r, reason ?? 'cancelled by the owner on the dashboard', 'dashboard');
    this.deps.audit.record({ actor: 'dashboard', action: 'agent_cancel', target: id, outcome: 'ok', details: { cancelled: out.cancelled } });
    return out;
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type AgentSpawnResult = Awaited<ReturnType<AgentService['spawn']>>;
export type AgentMessageResult = Awaited<ReturnType<AgentService['message']>>;
export type AgentCancelResult = Awaited<ReturnType<AgentService['cancel']>>;
export type AgentOwnerCancelResult = Awaited<ReturnType<AgentService['ownerCancel']>>;
