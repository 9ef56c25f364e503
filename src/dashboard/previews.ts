/**
 * Dashboard REST for preview URLs (owner session; CSRF on changes, see routes.ts; issue #33):
 *   GET  /api/v1/previews[?workspaceId=W&includeClosed=true]   open previews (all with includeClosed), oldest first
 *   POST /api/v1/previews/:id/public  { expectedGeneration? }  the owner's consent: the preview gets a public link
 *   POST /api/v1/previews/:id/revoke                           revoke: both links stop, open connections close
 * A public link exists only through the consent route: no tool can make one (docs/workspaces.md).
 */
import type { ApiRegistrar } from './routes.js';
import { ServiceError } from '../core/errors.js';

const PRV = /^prv_[A-Za-z0-9_-]{20,80}$/;

function bodyOf(raw: unknown, known: string[]): Record<string, unknown> {
  const b = (raw ?? {}) as Record<string, unknown>;
  if (b === null || typeof b !== 'object' || Array.isArray(b)) throw new ServiceError('INVALID_ARGUMENT', 'request body: must be a JSON object', { field: 'body' });
  for (const k of Object.keys(b)) if (!known.includes(k)) throw new ServiceError('INVALID_ARGUMENT', `${k}: unknown field (known: ${known.join(', ') || 'none'})`, { field: k });
  return b;
}

export const previewRoutes: ApiRegistrar = (api, app) => {
  api.get<{ Querystring: { workspaceId?: string; includeClosed?: string } }>('/previews', async (req) => {
    const q = req.query;
    if (q.workspaceId !== undefined && !/^ws_[A-Za-z0-9_-]{20,80}$/.test(q.workspaceId)) throw new ServiceError('INVALID_ARGUMENT', 'workspaceId: a ws_ identifier', { field: 'workspaceId' });
    if (q.includeClosed !== undefined && q.includeClosed !== 'true' && q.includeClosed !== 'false') throw new ServiceError('INVALID_ARGUMENT', 'includeClosed: true or false', { field: 'includeClosed' });
    const all = [];
    let cursor: string | undefined;
    // The dashboard shows every preview at once (a workspace has at most 20 open).
    for (let i = 0; i < 50; i++) {
      const page = app.previews.list(app.auth.ownerId, { workspaceId: q.workspaceId, includeClosed: q.includeClosed === 'true', limit: 100, cursor });
      all.push(...page.previews);
      if (!page.nextCursor) break;
      cursor = page.nextCursor;
    }
    return { previews: all };
  });

  api.post<{ Params: { id: string } }>('/previews/:id/public', async (req) => {
    if (!PRV.test(req.params.id)) throw new ServiceError('INVALID_ARGUMENT', 'id: a prv_ identifier', { field: 'id' });
    const b = bodyOf(req.body, ['expectedGeneration']);
    const g = b.expectedGeneration;
    if (g !== undefined && (typeof g !== 'number' || !Number.isInteger(g) || g < 1)) throw new ServiceError('INVALID_ARGUMENT', 'expectedGeneration: a positive integer', { field: 'expectedGeneration' });
    return app.previews.consentPublic(app.auth.ownerId, req.params.id, g as number | undefined);
  });

  api.post<{ Params: { id: string } }>('/previews/:id/revoke', async (req) => {
    if (!PRV.test(req.params.id)) throw new ServiceError('INVALID_ARGUMENT', 'id: a prv_ identifier', { field: 'id' });
    bodyOf(req.body, []);
    return app.previews.revoke(app.auth.ownerId, req.params.id, { actor: 'dashboard' });
  });
};
