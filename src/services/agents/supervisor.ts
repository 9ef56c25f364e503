/**
 * The agent supervisor (docs/agents.md): a running agent's runtime in its sandbox (from the pool of
 * pre-started runtimes, pool.ts), its gateway lease, the messages of its runtime, the tool calls it
 * proxies through the registry, its budget, timers and logs, and how it ends (its lease revoked, its
 * spend settled). The base of the agent service (agents.ts).
 */
import { contextOf, failSpan, injectHeaders, setAttrs, startSpan, withSpanContext } from '../../telemetry/tracing.js';
import { appendFileSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { AgentRuntimePool, SLOT_READY_MS } from './pool.js';
import type { Actor } from '../instance/index.js';
import { ServiceError, errorEnvelope, toErrorBody } from '../../core/errors.js';
import type { ClientProfile } from '../../sandbox/daemon/protocol.js';
import type { GatewayClient } from '../models/index.js';
import type { LeaseInfo } from '../../contracts/gateway.js';
import {
  type AgentStartConfig,
  type BudgetView,
  type RunnerMessage,
  type RuntimeMessage,
} from '../../contracts/agent.js';
import { AgentStatus, DRAIN_MS, Deps, Live, MAX_LOG_LINE, Row, TERMINAL, TOOL_RESULT_CAP_BYTES, clip, leaseFigures, sleep } from './records.js';

export class AgentSupervisor {
  protected readonly live = new Map<string, Live>();
  protected readonly logDir: string;
  protected readonly runDir: string;
  protected pool_: AgentRuntimePool | null = null;
  protected poolTimer: NodeJS.Timeout | null = null;

  constructor(protected readonly deps: Deps) {
    this.logDir = join(deps.config.dataDir, 'state', 'agents');
    this.runDir = join(deps.config.dataDir, 'run', 'agents');
  }

  /** Agent runtimes: pre-started idle ones (agentPoolSize) and those started on demand (src/services/agents/pool.ts). */
  protected get pool(): AgentRuntimePool {
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
  protected tendPool(): void {
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

  protected async launch(live: Live): Promise<void> {
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
  protected async gatewayLost(live: Live, why: string): Promise<void> {
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

  protected async repositoryContext(row: Row): Promise<string> {
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

  protected armTimers(live: Live): void {
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

  protected send(live: Live, runnerMessage: RunnerMessage): void {
    const s = live.conn;
    if (s && !s.destroyed) s.write(JSON.stringify(runnerMessage) + '\n');
  }

  protected async onRuntime(live: Live, runtimeMessage: RuntimeMessage): Promise<void> {
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

  protected async proxyCall(live: Live, name: string, raw: Record<string, unknown>): Promise<{ isError?: boolean; text: string }> {
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

  protected async budgetView(live: Live, fresh?: LeaseInfo): Promise<BudgetView> {
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

  protected releaseSlot(live: Live): void {
    if (live.slot && !live.released) {
      live.released = true;
      this.pool.release();
    }
  }

  protected mark(live: Live, what: string): void {
    live.marks[what] = Math.round((performance.now() - live.t0) * 10) / 10;
  }

  protected deliverSteer(live: Live, message: string): void {
    live.steersSent++;
    this.send(live, { t: 'steer', message });
  }

  // ------------------------------------------------------------------ ending

  protected setStatus(live: Live, status: AgentStatus, reason: string): void {
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
  protected turnSpan(live: Live, spanId: string | undefined, turn: number): void {
    live.turnSpan?.end();
    live.turnSpan = live.span ? startSpan('agent turn', { parent: contextOf(live.span), spanId, attributes: { 'gen_ai.agent.id': live.id, 'atelier.agent.turn': turn } }) : undefined;
  }

  protected finish(live: Live, status: AgentStatus, options: { summary?: string; reason?: string; error?: unknown; drainMs?: number }): Promise<void> {
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

  protected async finishing(live: Live, status: AgentStatus, options: { summary?: string; reason?: string; error?: unknown; drainMs?: number }): Promise<void> {
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

  protected logFile(id: string): string {
    return join(this.logDir, `${id}.log`);
  }

  /** Appends one event line (redacted, clipped); past maxOutputBytes nothing more is logged and the agent is stopped. */
  protected log(live: Live, event: Record<string, unknown>): void {
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

  protected line(id: string, event: Record<string, unknown>): string {
    let text = JSON.stringify(this.deps.environments.redact({ at: new Date().toISOString(), agentId: id, ...event }));
    if (text.length > MAX_LOG_LINE) text = JSON.stringify({ at: new Date().toISOString(), agentId: id, type: String(event.type ?? 'event'), clipped: true, text: clip(text, MAX_LOG_LINE - 200) });
    return text + '\n';
  }

  /** Status lines: written whatever the output cap (bounded). */
  protected appendRaw(id: string, event: Record<string, unknown>): void {
    mkdirSync(this.logDir, { recursive: true, mode: 0o700 });
    appendFileSync(this.logFile(id), this.line(id, event), { mode: 0o600 });
  }

  // ------------------------------------------------------------------ queries

  protected row(id: string): Row {
    const r = this.deps.db.prepare('SELECT * FROM agents WHERE id = ?').get(id) as Row | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `agentId: no agent ${id}`, { field: 'agentId' });
    return r;
  }

  protected isDescendant(row: Row, ancestor: string): boolean {
    let cur: Row | undefined = row;
    for (let i = 0; cur && cur.parent_id && i < 1000; i++) {
      if (cur.parent_id === ancestor) return true;
      cur = this.deps.db.prepare('SELECT * FROM agents WHERE id = ?').get(cur.parent_id) as Row | undefined;
    }
    return false;
  }

  protected descendants(id: string): Row[] {
    return this.deps.db
      .prepare(
        `WITH RECURSIVE t(id) AS (SELECT id FROM agents WHERE parent_id = ? UNION ALL SELECT a.id FROM agents a JOIN t ON a.parent_id = t.id)
         SELECT agents.* FROM agents JOIN t ON agents.id = t.id ORDER BY depth DESC, seq`,
      )
      .all(id) as Row[];
  }

  protected async cancelTree(row: Row, reason: string, by: string) {
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
}
