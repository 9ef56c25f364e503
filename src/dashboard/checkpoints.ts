/**
 * Dashboard REST paths of workspace checkpoints and forks (issue #33 item 5; owner session, CSRF on
 * changes, see routes.ts), the same service code as the MCP tools (docs/checkpoints.md):
 *   GET    /api/v1/checkpoints                   every checkpoint of the owner, the forks of each
 *                                                 open workspace and where each came from, the quota
 *   DELETE /api/v1/checkpoints/:id               (checkpoint_delete)
 */
import type { ApiRegistrar } from './routes.js';

export const checkpointRoutes: ApiRegistrar = (api, app) => {
  api.get('/checkpoints', async () => {
    const owner = app.auth.ownerId;
    const all: Record<string, unknown>[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 20; page++) {
      const r = app.checkpoints.list(owner, { cursor, limit: 100 }) as { checkpoints: Record<string, unknown>[]; nextCursor: string | null };
      all.push(...r.checkpoints);
      if (!r.nextCursor) break;
      cursor = r.nextCursor;
    }
    const open = (app.workspaces.list(undefined, 100) as { workspaces: Array<{ workspaceId: string }> }).workspaces.map((w) => w.workspaceId);
    const ids = new Set([...open, ...all.map((c) => c.workspaceId as string)]);
    const workspaces = [...ids].map((id) => {
      const f = app.checkpoints.forWorkspace(owner, id);
      return { workspaceId: id, open: open.includes(id), forkedFrom: f.forkedFrom, forks: f.forks, checkpoints: f.checkpoints.map((c) => c.checkpointId) };
    });
    return { checkpoints: all, workspaces, quota: app.checkpoints.usage(owner), limits: { quotaBytes: app.config.checkpointQuotaMb * 1_048_576, maxCount: app.config.checkpointMaxCount } };
  });
  api.delete<{ Params: { id: string } }>('/checkpoints/:id', async (req) => {
    return app.checkpoints.delete(app.auth.ownerId, { checkpointId: req.params.id }, 'dashboard');
  });
};
