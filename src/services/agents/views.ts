/**
 * What is read of agents (docs/agents.md): who may see which agent (its caller's tree), an agent
 * as agent_status and agent_list describe it, its log pages, and the owner's views for the
 * dashboard. On supervisor.ts; agents.ts (AgentService) builds on it.
 */
import { existsSync, openSync, readSync, closeSync, statSync } from 'node:fs';
import { ServiceError } from '../../core/errors.js';
import type { LeaseInfo } from '../../contracts/gateway.js';
import { describeAccess } from '../../core/toolsets.js';
import { AGENT_STATUSES, AgentBudgets, AgentCaller, AgentStatus, Row, TERMINAL, clip } from './records.js';
import { AgentSupervisor } from './supervisor.js';

export class AgentViews extends AgentSupervisor {
  /** The agent as the caller may see it: in the caller's workspace, and for an agent caller only its own descendants. */
  protected visible(id: string, agentCaller: AgentCaller, field = 'agentId'): Row {
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
  protected reachable(row: Row, agentCaller: AgentCaller, what: string): void {
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

  protected async view(row: Row, withLive = true) {
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

  async status(args: { agentId?: string; idempotencyKey?: string }, agentCaller: AgentCaller) {
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

  logs(args: { agentId: string; cursor?: string; limitBytes: number }, agentCaller: AgentCaller) {
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

  async list(args: { parentAgentId?: string; status?: AgentStatus; cursor?: string; limit: number }, agentCaller: AgentCaller) {
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

  protected brief(row: Row) {
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
  async ownerList(options: { status?: string; workspaceId?: string; limit?: number } = {}) {
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
  ownerLogTail(id: string, limitBytes = 8192) {
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

  /** Profile revisions pinned by live agents (kept in the gateway snapshot until they end, agent rule 3). */
  pins(): Array<{ profileId: string; revision: number }> {
    return [...this.live.values()].map((l) => ({ profileId: l.row.profile_id, revision: l.row.revision }));
  }

  /** For tests and the dashboard: live agents in this process. */
  liveCount(): number {
    return this.live.size;
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type AgentStatusResult = Awaited<ReturnType<AgentViews['status']>>;
export type AgentLogsResult = Awaited<ReturnType<AgentViews['logs']>>;
export type AgentListResult = Awaited<ReturnType<AgentViews['list']>>;
export type AgentOwnerListResult = Awaited<ReturnType<AgentViews['ownerList']>>;
export type AgentOwnerLogTailResult = Awaited<ReturnType<AgentViews['ownerLogTail']>>;
