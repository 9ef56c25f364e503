/**
 * The operator's view of the language servers (issue #44 item 6; owner session, see routes.ts):
 *   GET /api/v1/code-servers   per active workspace, its language servers from the running sandbox:
 *                              server, state, pid, resident memory (the server's processes), open
 *                              documents, restarts and the last exit's reason
 *
 * A status read only: no sandbox and no server is started, no idle lease moves, and each workspace
 * is bounded (PER_WORKSPACE_MS): one whose daemon does not answer in time is listed with an error.
 */
import type { ApiRegistrar } from './routes.js';
import { ServiceError } from '../core/errors.js';

/** How long one workspace's daemon is given to answer. */
export const PER_WORKSPACE_MS = 2_000;
/** Workspaces listed at most (the rest are counted in `omitted`). */
const MAX_WORKSPACES = 500;
const PAGE = 100;

interface ListedWorkspace {
  workspaceId: string;
  state: string;
  repositoryUrl?: string;
  branch?: string | null;
}

export const codeServerRoutes: ApiRegistrar = (api, app) => {
  api.get('/code-servers', async () => {
    const active: ListedWorkspace[] = [];
    let cursor: string | undefined;
    let omitted = 0;
    do {
      const page = app.workspaces.list(cursor, PAGE) as { workspaces: ListedWorkspace[]; nextCursor: string | null };
      for (const w of page.workspaces) {
        if (w.state !== 'active') continue;
        if (active.length < MAX_WORKSPACES) active.push(w);
        else omitted++;
      }
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    const workspaces = await Promise.all(
      active.map(async (w) => {
        const base = { workspaceId: w.workspaceId, repositoryUrl: w.repositoryUrl ?? null, branch: w.branch ?? null };
        try {
          const r = await app.codeIntel.operatorStatus(w.workspaceId, PER_WORKSPACE_MS);
          if (r.sandbox === 'stopped') return { ...base, sandbox: 'stopped', servers: [] };
          const servers = r.servers
            .filter((s) => s.state !== 'not_installed' || s.restarts > 0)
            .map((s) => ({
              server: s.server,
              title: s.title,
              state: s.state,
              pid: s.pid ?? null,
              memoryBytes: s.memoryBytes ?? null,
              openDocuments: s.openDocuments ?? null,
              startedAt: s.startedAt ?? null,
              restarts: s.restarts,
              requests: s.requests,
              lastExit: s.lastExit ?? null,
            }));
          return { ...base, sandbox: 'running', servers, memoryBytes: servers.reduce((n, s) => n + (s.memoryBytes ?? 0), 0) };
        } catch (err) {
          const code = err instanceof ServiceError ? err.code : 'INTERNAL';
          const message = err instanceof ServiceError ? err.message : 'the sandbox daemon failed to answer';
          const timedOut = code === 'DEADLINE_EXCEEDED' || code === 'CANCELLED' || /abort|time/i.test(String((err as Error)?.message));
          return { ...base, sandbox: 'unknown', servers: [], error: { code: timedOut ? 'DEADLINE_EXCEEDED' : code, message: timedOut ? `the sandbox daemon did not answer within ${PER_WORKSPACE_MS} ms` : message } };
        }
      }),
    );
    return { workspaces, omitted, perWorkspaceTimeoutMs: PER_WORKSPACE_MS, asOf: new Date().toISOString() };
  });
};
