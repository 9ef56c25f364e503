/**
 * Dashboard REST for the model control plane (owner session; CSRF on changes, see routes.ts).
 * Same service as the MCP tools (src/services/models/profiles.ts); bodies are validated by the same tool
 * schemas. Request and response bodies: docs/rest.md. Keys go in, never out.
 *   GET    /api/v1/model-providers[?provider=]              registry + credential metadata (model_provider_list)
 *   GET    /api/v1/provider-credentials[?provider=]         credential metadata
 *   POST   /api/v1/provider-credentials                     { provider, key, authHeader?, label? }
 *   POST   /api/v1/provider-credentials/:id/rotate          { key }  (new key version)
 *   POST   /api/v1/provider-credentials/:id/disable | /enable
 *   DELETE /api/v1/provider-credentials/:id
 *   GET    /api/v1/model-catalog?provider=&credentialId=&query=&cursor=&limit=&capability=   (model_catalog_search)
 *   POST   /api/v1/model-connection/verify                  (model_connection_verify)
 *   GET    /api/v1/agent-model-profiles[?profileId=]        (model_profile_list)
 *   POST   /api/v1/agent-model-profiles/validate            (model_profile_validate)
 *   POST   /api/v1/agent-model-profiles                     (model_profile_create)
 *   PATCH  /api/v1/agent-model-profiles                     (model_profile_update)
 *   POST   /api/v1/agent-model-profiles/:id/activate        { revision?, expectedGeneration? } (owner only)
 *   POST   /api/v1/agent-model-profiles/:id/disable         (owner only)
 *   DELETE /api/v1/agent-model-profiles/:id                 (owner only)
 *   GET    /api/v1/agent-model-config-status                gateway answer + last push attempt
 * Every save of a profile or credential pushes a snapshot; the save succeeds even when the push fails.
 */
import type { FastifyInstance } from 'fastify';
import { sendError, type ApiRegistrar } from './routes.js';
import type { App } from '../app.js';
import { ServiceError } from '../core/errors.js';
import { ToolParser } from '../tools/validate.js';
import { tools as modelTools } from '../tools/models.js';
import { PROVIDER_IDS, type ProviderId } from '../core/providers.js';

export const MODELS_SERVED_PATHS = [
  'GET /model-providers',
  'GET /provider-credentials',
  'GET /model-catalog',
  'POST /model-connection/verify',
  'POST /agent-model-profiles/validate',
  'POST /agent-model-profiles',
  'PATCH /agent-model-profiles',
  'POST /agent-model-profiles/:id/activate',
  'GET /agent-model-config-status',
];

const DASHBOARD_PRINCIPAL = 'dashboard:owner';

function body(req: { body: unknown }): Record<string, unknown> {
  const b = req.body;
  if (b === undefined || b === null) return {};
  if (typeof b !== 'object' || Array.isArray(b)) throw new ServiceError('INVALID_ARGUMENT', 'request body: must be a JSON object', {});
  return b as Record<string, unknown>;
}

function providerQuery(q: unknown): ProviderId | undefined {
  const p = (q as Record<string, string | undefined>).provider;
  if (p === undefined) return undefined;
  if (!(PROVIDER_IDS as readonly string[]).includes(p)) throw new ServiceError('INVALID_ARGUMENT', `provider: must be one of ${PROVIDER_IDS.join(', ')}`, { field: 'provider' });
  return p as ProviderId;
}

export async function pushSnapshot(app: App): Promise<{ ok: boolean; error?: string }> {
  try {
    await app.gateway.push();
    return { ok: true };
  } catch (e) {
    return { ok: false, error: (e as Error).message };
  }
}

export const modelRoutes: ApiRegistrar = (parent, app) => {
  // A child context (the session and CSRF hook is inherited) whose error handler never echoes a
  // body parser message: JSON.parse messages quote the input, which may hold a provider key.
  parent.register(async (api) => {
    api.setErrorHandler((err, _req, reply) => {
      if (err instanceof ServiceError) return sendError(reply, err);
      const e = err as { statusCode?: number };
      if (e.statusCode && e.statusCode < 500) return sendError(reply, new ServiceError('INVALID_ARGUMENT', 'request body: not a valid JSON object', {}));
      app.log.error({ errName: (err as Error).name }, 'dashboard model API failure');
      return sendError(reply, new ServiceError('INTERNAL', 'internal error', {}));
    });
    register(api, app);
  });
};

function register(api: FastifyInstance, app: App): void {
  const parser = new ToolParser(modelTools);
  const m = app.models;

  // ---- registry and credentials ----
  api.get('/model-providers', async (req) => m.providerList(providerQuery(req.query)));
  api.get('/provider-credentials', async (req) => ({ credentials: m.listCredentials(providerQuery(req.query)) }));

  api.post('/provider-credentials', async (req, reply) => {
    const b = body(req);
    const credential = m.createCredential({ provider: b.provider, key: b.key, authHeader: b.authHeader, label: b.label });
    return reply.code(201).send({ credential, gatewayPush: await pushSnapshot(app) });
  });
  api.post<{ Params: { id: string } }>('/provider-credentials/:id/rotate', async (req) => {
    const credential = m.rotateCredential(req.params.id, body(req).key);
    return { credential, gatewayPush: await pushSnapshot(app) };
  });
  api.post<{ Params: { id: string } }>('/provider-credentials/:id/disable', async (req) => ({ credential: m.setCredentialStatus(req.params.id, 'disabled'), gatewayPush: await pushSnapshot(app) }));
  api.post<{ Params: { id: string } }>('/provider-credentials/:id/enable', async (req) => ({ credential: m.setCredentialStatus(req.params.id, 'active'), gatewayPush: await pushSnapshot(app) }));
  api.delete<{ Params: { id: string } }>('/provider-credentials/:id', async (req) => ({ ...m.deleteCredential(req.params.id), gatewayPush: await pushSnapshot(app) }));

  // ---- catalog and connection checks ----
  api.get('/model-catalog', async (req) => {
    const q = { ...(req.query as Record<string, string | undefined>) } as Record<string, unknown>;
    if (typeof q.limit === 'string') q.limit = /^\d+$/.test(q.limit) ? Number(q.limit) : q.limit;
    const a = parser.parse('model_catalog_search', q);
    return app.modelCatalog.search(a as Parameters<typeof app.modelCatalog.search>[0]);
  });
  api.post('/model-connection/verify', async (req) => {
    const a = parser.parse('model_connection_verify', body(req));
    return app.modelChecks.verify(a, 'dashboard', DASHBOARD_PRINCIPAL);
  });

  // ---- profiles ----
  api.get('/agent-model-profiles', async (req) => {
    const q = req.query as Record<string, string | undefined>;
    const a = parser.parse('model_profile_list', q.profileId === undefined ? {} : { profileId: q.profileId });
    return m.list(a.profileId as string | undefined);
  });

  api.post('/agent-model-profiles/validate', async (req) => {
    const { action, ...input } = parser.parse('model_profile_validate', body(req));
    return m.validate(action as 'create' | 'update', input, 'dashboard', DASHBOARD_PRINCIPAL);
  });

  const save = async (tool: 'model_profile_create' | 'model_profile_update', raw: Record<string, unknown>): Promise<Record<string, unknown>> => {
    const args = parser.parse(tool, raw);
    const { idempotencyKey, ...input } = args;
    const scope = `rest:${tool}`;
    const prior = app.idempotency.lookup(scope, idempotencyKey as string, args);
    if (prior) return { ...prior.result, replayed: true };
    const r = m.save(tool === 'model_profile_create' ? 'create' : 'update', input, 'dashboard', DASHBOARD_PRINCIPAL);
    app.audit.record({ actor: 'dashboard', action: tool, target: input.profileId as string, outcome: 'ok' });
    const result = { ...r, gatewayPush: await pushSnapshot(app) };
    app.idempotency.save(scope, idempotencyKey as string, args, result);
    return result;
  };
  api.post('/agent-model-profiles', async (req, reply) => {
    const r = await save('model_profile_create', body(req));
    return reply.code(r.replayed ? 200 : 201).send(r);
  });
  api.patch('/agent-model-profiles', async (req) => save('model_profile_update', body(req)));

  api.post<{ Params: { id: string } }>('/agent-model-profiles/:id/activate', async (req) => {
    const b = body(req);
    for (const f of ['revision', 'expectedGeneration'] as const)
      if (b[f] !== undefined && (typeof b[f] !== 'number' || !Number.isInteger(b[f]))) throw new ServiceError('INVALID_ARGUMENT', `${f}: must be an integer`, { field: f });
    const profile = m.activate(req.params.id, { revision: b.revision as number | undefined, expectedGeneration: b.expectedGeneration as number | undefined });
    return { profile, gatewayPush: await pushSnapshot(app) };
  });
  api.post<{ Params: { id: string } }>('/agent-model-profiles/:id/disable', async (req) => ({ profile: m.disable(req.params.id), gatewayPush: await pushSnapshot(app) }));
  api.delete<{ Params: { id: string } }>('/agent-model-profiles/:id', async (req) => ({ ...m.deleteProfile(req.params.id), gatewayPush: await pushSnapshot(app) }));

  api.get('/agent-model-config-status', async () => {
    let gateway: Record<string, unknown>;
    try {
      const st = await app.gateway.status();
      gateway = { answered: true, checkedAt: new Date().toISOString(), bootId: st.bootId, generation: st.generation, profileCount: st.profileCount, noProfilesSinceRestart: st.noProfilesSinceRestart };
    } catch (e) {
      gateway = { answered: false, checkedAt: new Date().toISOString(), error: (e as Error).message };
    }
    const p = app.gateway.push_;
    const routes = m.routes();
    return {
      gateway,
      push: { lastAttemptAt: p.lastAttemptAt, lastSuccessAt: p.lastSuccessAt, lastError: p.lastError, generation: p.generation, bootId: p.bootId },
      routes: routes.map((r) => ({ profileId: r.profileId, revision: r.revision, provider: r.provider, credentialId: r.credential.id })),
      inSync: gateway.answered === true && p.lastSuccessAt !== null && p.lastError === null && gateway.bootId === p.bootId && gateway.generation === p.generation,
    };
  });
}
