/**
 * Dashboard REST for repository credentials (owner session + CSRF, see routes.ts). Secrets go in,
 * never out: every answer carries metadata (prefix, kind, fingerprint, versions, last use).
 *   GET    /api/v1/repository-credentials                 { credentials: [RepoCredentialMeta] }
 *   POST   /api/v1/repository-credentials                 { kind: "token", prefix, token, username?, label? }
 *                                                         { kind: "github_app", prefix, appId, privateKey, installationId?, apiUrl?, label? }  -> 201 { credential }
 *   GET    /api/v1/repository-credentials/:id             { credential }
 *   POST   /api/v1/repository-credentials/:id/rotate      { token } or { privateKey }  -> { credential }
 *   DELETE /api/v1/repository-credentials/:id             { deleted: true, id, prefix }
 *   POST   /api/v1/repository-credentials/:id/test        { repositoryUrl }  -> { ok, httpStatus, minted, expiresAt, detail }
 */
import type { ApiRegistrar } from './routes.js';
import { ServiceError } from '../core/errors.js';

const TOKEN_FIELDS = new Set(['kind', 'prefix', 'token', 'username', 'label']);
const APP_FIELDS = new Set(['kind', 'prefix', 'appId', 'privateKey', 'installationId', 'apiUrl', 'label']);

function body(req: { body: unknown }, allowed: Set<string>): Record<string, unknown> {
  const b = req.body ?? {};
  if (typeof b !== 'object' || Array.isArray(b)) throw new ServiceError('INVALID_ARGUMENT', 'request body: must be a JSON object', {});
  for (const k of Object.keys(b)) if (!allowed.has(k)) throw new ServiceError('INVALID_ARGUMENT', `${k}: unknown field (allowed: ${[...allowed].join(', ')})`, { field: k });
  return b as Record<string, unknown>;
}

export const repoCredentialRoutes: ApiRegistrar = (api, app) => {
  const store = app.repoCredentials;

  api.get('/repository-credentials', async () => ({ credentials: store.list() }));

  api.post('/repository-credentials', async (req, reply) => {
    const kind = (req.body as Record<string, unknown> | null)?.kind;
    if (kind === 'token') {
      const b = body(req, TOKEN_FIELDS);
      return reply.code(201).send({ credential: store.addToken({ prefix: b.prefix, token: b.token, username: b.username, label: b.label }, 'dashboard') });
    }
    if (kind === 'github_app') {
      const b = body(req, APP_FIELDS);
      return reply.code(201).send({ credential: store.addGitHubApp({ prefix: b.prefix, appId: b.appId, privateKey: b.privateKey, installationId: b.installationId, apiUrl: b.apiUrl, label: b.label }, 'dashboard') });
    }
    throw new ServiceError('INVALID_ARGUMENT', 'kind: must be "token" or "github_app"', { field: 'kind' });
  });

  api.get<{ Params: { id: string } }>('/repository-credentials/:id', async (req) => ({ credential: store.get(req.params.id) }));

  api.post<{ Params: { id: string } }>('/repository-credentials/:id/rotate', async (req) => {
    const kind = store.get(req.params.id).kind;
    const b = body(req, new Set([kind === 'token' ? 'token' : 'privateKey']));
    return { credential: store.rotate(req.params.id, kind === 'token' ? b.token : b.privateKey, 'dashboard') };
  });

  api.delete<{ Params: { id: string } }>('/repository-credentials/:id', async (req) => store.remove(req.params.id, 'dashboard'));

  api.post<{ Params: { id: string } }>('/repository-credentials/:id/test', async (req) => {
    const b = body(req, new Set(['repositoryUrl']));
    return store.test(req.params.id, b.repositoryUrl);
  });
};
