/**
 * Dashboard REST for coding subagents (owner session; CSRF on changes, see routes.ts):
 *   GET  /api/v1/agents[?status=S&workspaceId=W&limit=N]   every agent, newest first: tree links, status, budgets, spend
 *   GET  /api/v1/agents/:id/log[?limitBytes=N]              the log's tail (256-65536 bytes, default 8192), whole lines, redacted
 *   POST /api/v1/agents/:id/cancel  { reason? }            cancel an agent and, in cascade, its descendants
 * Bodies are documented in docs/rest.md ("Agents").
 */
import type { ApiRegistrar } from './routes.js';
import { ServiceError } from '../core/errors.js';

export const agentRoutes: ApiRegistrar = (api, app) => {
  api.get<{ Querystring: { status?: string; workspaceId?: string; limit?: string } }>('/agents', async (req) => {
    const q = req.query;
    let limit: number | undefined;
    if (q.limit !== undefined) {
      limit = Number(q.limit);
      if (!/^[0-9]{1,4}$/.test(q.limit) || limit < 1 || limit > 1000) throw new ServiceError('INVALID_ARGUMENT', 'limit: an integer from 1 to 1000', { field: 'limit' });
    }
    if (q.workspaceId !== undefined && !/^ws_[A-Za-z0-9_-]{20,80}$/.test(q.workspaceId)) throw new ServiceError('INVALID_ARGUMENT', 'workspaceId: a ws_ identifier', { field: 'workspaceId' });
    await app.gateway.syncUsage().catch(() => undefined);
    return app.agents.ownerList({ status: q.status, workspaceId: q.workspaceId, limit });
  });

  api.get<{ Params: { id: string }; Querystring: { limitBytes?: string } }>('/agents/:id/log', async (req) => {
    if (!/^agent_[A-Za-z0-9_-]{20,80}$/.test(req.params.id)) throw new ServiceError('INVALID_ARGUMENT', 'id: an agent_ identifier', { field: 'id' });
    const lb = req.query.limitBytes;
    if (lb !== undefined && (!/^[0-9]{1,6}$/.test(lb) || Number(lb) < 256 || Number(lb) > 65536)) throw new ServiceError('INVALID_ARGUMENT', 'limitBytes: an integer from 256 to 65536', { field: 'limitBytes' });
    return app.agents.ownerLogTail(req.params.id, lb === undefined ? undefined : Number(lb));
  });

  api.post<{ Params: { id: string } }>('/agents/:id/cancel', async (req) => {
    const b = (req.body ?? {}) as Record<string, unknown>;
    if (b === null || typeof b !== 'object' || Array.isArray(b)) throw new ServiceError('INVALID_ARGUMENT', 'request body: must be a JSON object', {});
    for (const k of Object.keys(b)) if (k !== 'reason') throw new ServiceError('INVALID_ARGUMENT', `${k}: unknown field (known: reason)`, { field: k });
    return app.agents.ownerCancel(req.params.id, b.reason as string | undefined);
  });
};
