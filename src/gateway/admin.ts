/**
 * The admin API the runner drives (/admin/*, Authorization: Bearer <admin secret>): status,
 * snapshots, leases, agent-tree carves, usage events and windows. docs/gateway.md has the table.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { NO_POLICIES, type CarveAnswer, type CarveRequest, type LeaseRequest, type Snapshot, type SpendPolicies } from '../contracts/gateway.js';
import { gatewayStatus, type GatewayContext } from './context.js';
import { readBody, sendError, sendJson } from './http.js';
import { buildRoutes, leaseBudgets, leaseProblem, routeKey, snapshotProblem } from './routing.js';

export async function handleAdmin(ctx: GatewayContext, req: IncomingMessage, res: ServerResponse, path: string, query: URLSearchParams): Promise<void> {
  const { budget } = ctx;
  if (!ctx.adminAuthorized(req.headers.authorization)) return sendError(res, 401, 'unauthenticated', 'admin secret required');
  const m = req.method;
  if (m === 'GET' && path === '/admin/status') return sendJson(res, 200, gatewayStatus(ctx));
  if (m === 'PUT' && path === '/admin/snapshot') {
    const raw = await readBody(req, 64 * 1024 * 1024);
    if (!raw) return sendError(res, 413, 'body_too_large', 'snapshot too large');
    let s: Snapshot;
    try {
      s = JSON.parse(raw.toString('utf8')) as Snapshot;
      const problem = snapshotProblem(s);
      if (problem) throw new Error(problem);
    } catch (e) {
      return sendError(res, 400, 'invalid_snapshot', `snapshot: ${(e as Error).message}`);
    }
    let next: ReturnType<typeof buildRoutes>;
    try {
      next = buildRoutes(s, ctx.agents);
    } catch (e) {
      return sendError(res, 400, 'invalid_snapshot', (e as Error).message);
    }
    if (typeof next === 'string') return sendError(res, 400, 'invalid_snapshot', next);
    // Replace whole: requests in flight keep the Route object (and key) they started with.
    ctx.routes = next;
    ctx.generation = s.generation;
    budget.policies = { ...NO_POLICIES, ...(s.policies ?? {}) } as SpendPolicies;
    budget.setBaselines(s.windows);
    if (s.sessionHeader !== undefined) ctx.sessionHeader = s.sessionHeader ? s.sessionHeader.toLowerCase() : ctx.defaultSessionHeader;
    ctx.log('info', 'snapshot applied', { generation: ctx.generation, profiles: ctx.routes.size });
    return sendJson(res, 200, { ...gatewayStatus(ctx), windows: budget.windowTotals() });
  }
  if (m === 'POST' && path === '/admin/leases') {
    const raw = await readBody(req, 1024 * 1024);
    let b: LeaseRequest;
    try {
      b = JSON.parse(raw?.toString('utf8') ?? '') as LeaseRequest;
    } catch {
      return sendError(res, 400, 'invalid_lease', 'lease: not JSON');
    }
    const bad = leaseProblem(b);
    if (bad) return sendError(res, 400, 'invalid_lease', `lease: ${bad}`);
    const route = ctx.routes.get(routeKey(b.profileId, b.revision));
    if (!route) return sendError(res, 409, 'route_unavailable', `profile ${b.profileId} revision ${b.revision} is not in the current snapshot`, { noProfilesSinceRestart: ctx.generation === null });
    if (b.carveId !== undefined && !budget.carves.has(b.carveId)) return sendError(res, 409, 'carve_unavailable', `carve ${b.carveId} is not held (used, released, or lost with a gateway restart)`);
    const { lease, token } = budget.issue({ ...b, budgets: leaseBudgets(b.budgets, route.src.limits) });
    return sendJson(res, 201, { ...budget.info(lease), token });
  }
  // Agent trees (docs/agents.md "Trees"): a child's budgets are carved out of its parent's lease at
  // spawn; the carve becomes the child's lease (carveId) or goes back (DELETE). What an ended lease
  // leaves goes back up the tree by itself (Budget.revoke), so the runner never adds budget.
  const cm = /^\/admin\/leases\/([A-Za-z0-9_-]+)\/carve$/.exec(path);
  if (cm && m === 'POST') {
    let body: Partial<CarveRequest>;
    try {
      body = JSON.parse((await readBody(req, 4096))?.toString('utf8') ?? '') as Partial<CarveRequest>;
    } catch {
      return sendError(res, 400, 'invalid_request', 'body: not JSON');
    }
    for (const k of ['inputTokens', 'outputTokens', 'costMicros'] as const)
      if (!Number.isSafeInteger(body?.[k]) || (body[k] as number) < 0) return sendError(res, 400, 'invalid_request', `${k} must be a non-negative integer`);
    const r = budget.carve(cm[1]!, body as CarveRequest);
    if (!r.ok && r.reason === 'not_found') return sendError(res, 404, 'not_found', 'no such live lease');
    if (!r.ok) return sendError(res, 409, 'budget_exceeded', `${r.field} is more than the lease has left`, { field: r.field, parentRemaining: r.room });
    return sendJson(res, 201, { carveId: r.carve.id, parentRemaining: r.room } satisfies CarveAnswer);
  }
  const rm = /^\/admin\/carves\/([A-Za-z0-9_-]+)$/.exec(path);
  if (rm && m === 'DELETE') {
    if (!budget.releaseCarve(rm[1]!)) return sendError(res, 404, 'not_found', 'no such carve held');
    return sendJson(res, 200, { released: rm[1] });
  }
  const lm = /^\/admin\/leases\/([A-Za-z0-9_-]+)$/.exec(path);
  if (lm && (m === 'GET' || m === 'DELETE')) {
    const l = m === 'DELETE' ? budget.revoke(lm[1]!) : budget.leasesById.get(lm[1]!);
    if (!l) return sendError(res, 404, 'not_found', 'no such lease');
    return sendJson(res, 200, budget.info(l));
  }
  if (m === 'GET' && path === '/admin/usage') {
    const after = Number(query.get('after') ?? '0');
    const limit = Math.min(10_000, Math.max(1, Number(query.get('limit') ?? '5000')));
    const events = budget.eventsAfter(Number.isSafeInteger(after) && after >= 0 ? after : 0, limit);
    return sendJson(res, 200, { bootId: ctx.bootId, events, lastSeq: budget.seq, oldestSeq: budget.events[0]?.seq ?? budget.seq + 1 });
  }
  if (m === 'GET' && path === '/admin/windows') return sendJson(res, 200, { windows: budget.windowTotals(), policies: budget.policies });
  return sendError(res, 404, 'not_found', `no admin route ${m} ${path}`);
}
