/**
 * Dashboard REST for repository extensions (owner session + CSRF), docs/extensions.md:
 *   GET    /api/v1/skills                          owner and built-in skills
 *   PUT    /api/v1/skills/:name                    add or replace an owner skill: { files: { "SKILL.md": "...", "scripts/x.sh": "..." }, encoding?: "utf-8" | "base64" }
 *   DELETE /api/v1/skills/:name
 *   GET    /api/v1/deployment-enrolments
 *   POST   /api/v1/deployment-enrolments           { repositoryUrl, target, targetSha256, environmentId?, allowPrivateHosts? }
 *   DELETE /api/v1/deployment-enrolments?repositoryUrl=URL&target=NAME
 */
import type { ApiRegistrar } from './routes.js';
import { ServiceError } from '../core/errors.js';

const bad = (field: string, message: string) => new ServiceError('INVALID_ARGUMENT', `${field}: ${message}`, { field });

function body(req: { body: unknown }): Record<string, unknown> {
  const b = req.body;
  if (!b || typeof b !== 'object' || Array.isArray(b)) throw bad('body', 'a JSON object');
  return b as Record<string, unknown>;
}

export const skillRoutes: ApiRegistrar = (api, app) => {
  api.get('/skills', async () => ({ skills: app.extensions.skills.ownerList() }));
  api.put<{ Params: { name: string } }>('/skills/:name', async (req) => {
    const b = body(req);
    const enc = b.encoding ?? 'utf-8';
    if (enc !== 'utf-8' && enc !== 'base64') throw bad('encoding', 'utf-8 or base64');
    const f = b.files;
    if (!f || typeof f !== 'object' || Array.isArray(f)) throw bad('files', 'an object mapping paths to contents');
    const files: Record<string, Buffer> = {};
    for (const [p, c] of Object.entries(f as Record<string, unknown>)) {
      if (typeof c !== 'string') throw bad('files', `${p.slice(0, 200)}: content must be a string`);
      files[p] = Buffer.from(c, enc === 'base64' ? 'base64' : 'utf8');
    }
    return app.extensions.skills.ownerPut(files, 'dashboard', req.params.name);
  });
  api.delete<{ Params: { name: string } }>('/skills/:name', async (req) => app.extensions.skills.ownerRemove(req.params.name, 'dashboard'));
  api.get('/deployment-enrolments', async () => ({ enrolments: app.extensions.deployments.enrolments() }));
  api.post('/deployment-enrolments', async (req) => {
    const b = body(req);
    for (const k of ['repositoryUrl', 'target', 'targetSha256']) if (typeof b[k] !== 'string') throw bad(k, 'required string');
    if (b.environmentId !== undefined && typeof b.environmentId !== 'string') throw bad('environmentId', 'a string');
    if (b.allowPrivateHosts !== undefined && typeof b.allowPrivateHosts !== 'boolean') throw bad('allowPrivateHosts', 'a boolean');
    return app.extensions.deployments.enrol(
      { repositoryUrl: b.repositoryUrl as string, target: b.target as string, targetSha256: b.targetSha256 as string, environmentId: b.environmentId as string | undefined, allowPrivateHosts: b.allowPrivateHosts as boolean | undefined },
      'dashboard',
    );
  });
  api.delete('/deployment-enrolments', async (req) => {
    const q = req.query as Record<string, unknown>;
    if (typeof q.repositoryUrl !== 'string' || typeof q.target !== 'string') throw bad('target', 'repositoryUrl and target are required query parameters');
    return app.extensions.deployments.revoke(q.repositoryUrl, q.target, 'dashboard');
  });
};
