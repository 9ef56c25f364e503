/**
 * Dashboard REST for environments, variables and secrets (owner session + CSRF, see routes.ts).
 * Secret values go in, never out.
 *   GET    /api/v1/environments                      list (plus the "global" scope)
 *   POST   /api/v1/environments                      { name, description? } -> environment
 *   DELETE /api/v1/environments/:env                 env id or name
 *   GET    /api/v1/environments/:env/entries         names, kinds, descriptions ("global" for the global scope)
 *   PUT    /api/v1/environments/:env/entries/:name   { value, secret?, description?, setupOnly? }
 *   DELETE /api/v1/environments/:env/entries/:name
 *   GET    /api/v1/environments/:env/scripts         { setupScript, maintenanceScript } (docs/templates.md)
 *   PUT    /api/v1/environments/:env/scripts         { setupScript?, maintenanceScript? } (a string sets, null removes, absent keeps)
 *   GET    /api/v1/templates                         workspace templates with state, size and failure reason
 *   DELETE /api/v1/templates/:id
 */
import type { ApiRegistrar } from './routes.js';
import { ServiceError } from '../core/errors.js';

function body(req: { body: unknown }): Record<string, unknown> {
  const b = req.body;
  if (b === undefined || b === null) return {};
  if (typeof b !== 'object' || Array.isArray(b)) throw new ServiceError('INVALID_ARGUMENT', 'request body: must be a JSON object', {});
  return b as Record<string, unknown>;
}

function str(b: Record<string, unknown>, field: string, required: boolean): string | undefined {
  const v = b[field];
  if (v === undefined && !required) return undefined;
  if (typeof v !== 'string') throw new ServiceError('INVALID_ARGUMENT', `${field}: ${required ? 'is required and ' : ''}must be a string`, { field });
  return v;
}

export const environmentRoutes: ApiRegistrar = (api, app) => {
  const audit = (action: string, target: string) => app.audit.record({ actor: 'dashboard', action, target, outcome: 'ok' });

  api.get('/environments', async () => ({ environments: app.environments.list(), globalScope: 'global' }));

  api.post('/environments', async (req, reply) => {
    const b = body(req);
    const e = app.environments.create(str(b, 'name', true)!, str(b, 'description', false) ?? '');
    audit('environment_create', e.id);
    return reply.code(201).send(e);
  });

  api.delete<{ Params: { env: string } }>('/environments/:env', async (req) => {
    const id = app.environments.resolve(req.params.env, 'environment');
    app.environments.delete(req.params.env);
    await app.templates.forgetEnvironment(id);
    audit('environment_delete', req.params.env);
    return { deleted: true };
  });

  api.get<{ Params: { env: string } }>('/environments/:env/entries', async (req) => ({ entries: app.environments.entries(req.params.env) }));

  api.put<{ Params: { env: string; name: string } }>('/environments/:env/entries/:name', async (req) => {
    const b = body(req);
    const secret = b.secret === undefined ? false : b.secret;
    if (typeof secret !== 'boolean') throw new ServiceError('INVALID_ARGUMENT', 'secret: must be a boolean', { field: 'secret' });
    const setupOnly = b.setupOnly === undefined ? false : b.setupOnly;
    if (typeof setupOnly !== 'boolean') throw new ServiceError('INVALID_ARGUMENT', 'setupOnly: must be a boolean', { field: 'setupOnly' });
    const e = app.environments.set(req.params.env, req.params.name, str(b, 'value', true)!, { secret, description: str(b, 'description', false), setupOnly });
    audit(secret ? 'secret_set' : 'variable_set', `${e.scope}/${e.name}`);
    return e;
  });

  api.delete<{ Params: { env: string; name: string } }>('/environments/:env/entries/:name', async (req) => {
    app.environments.unset(req.params.env, req.params.name);
    audit('env_unset', `${req.params.env}/${req.params.name}`);
    return { deleted: true };
  });

  api.get<{ Params: { env: string } }>('/environments/:env/scripts', async (req) => app.environments.scripts(req.params.env));

  api.put<{ Params: { env: string } }>('/environments/:env/scripts', async (req) => {
    const b = body(req);
    for (const k of Object.keys(b)) if (k !== 'setupScript' && k !== 'maintenanceScript') throw new ServiceError('INVALID_ARGUMENT', `${k}: not a field (known: setupScript, maintenanceScript)`, { field: k });
    const pick = (k: 'setupScript' | 'maintenanceScript') => {
      const v = b[k];
      if (v !== undefined && v !== null && typeof v !== 'string') throw new ServiceError('INVALID_ARGUMENT', `${k}: must be a string, or null to remove the script`, { field: k });
      return v as string | null | undefined;
    };
    const s = app.environments.setScripts(req.params.env, { setupScript: pick('setupScript'), maintenanceScript: pick('maintenanceScript') });
    audit('environment_scripts_set', s.environmentId);
    return s;
  });

  api.get('/templates', async () => ({ templates: app.templates.list() }));

  api.delete<{ Params: { id: string } }>('/templates/:id', async (req) => {
    await app.templates.delete(req.params.id);
    audit('template_delete', req.params.id);
    return { deleted: true };
  });
};
