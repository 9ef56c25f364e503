/**
 * Dashboard REST for spend (owner session; CSRF on changes, see routes.ts):
 *   GET /api/v1/model-spend[?period=day|month]   estimated spend per UTC window with the policies that bound it
 *   GET /api/v1/spend-policies                    the owner's spend policies
 *   PUT /api/v1/spend-policies                    { dailyCapMicros?, monthlyCapMicros?, perAgentCapMicros? } (null = no cap)
 * A policy change is pushed to the gateway at once (the save succeeds even when the push fails).
 */
import type { ApiRegistrar } from './routes.js';
import { ServiceError } from '../core/errors.js';

export const SPEND_SERVED_PATHS = ['GET /model-spend'];

export const spendRoutes: ApiRegistrar = (api, app) => {
  api.get<{ Querystring: { period?: string } }>('/model-spend', async (req) => {
    const p = req.query.period;
    if (p !== undefined && p !== 'day' && p !== 'month') throw new ServiceError('INVALID_ARGUMENT', 'period: must be day or month', { field: 'period' });
    await app.gateway.syncUsage().catch(() => undefined);
    return app.spend.summary(p);
  });

  api.get('/spend-policies', async () => ({ policies: app.spend.policies() }));

  api.put('/spend-policies', async (req) => {
    const b = req.body;
    if (b === null || typeof b !== 'object' || Array.isArray(b)) throw new ServiceError('INVALID_ARGUMENT', 'request body: must be a JSON object', {});
    const policies = app.spend.setPolicies(b as Record<string, unknown>);
    app.audit.record({ actor: 'dashboard', action: 'spend_policies_set', target: 'spend_policies', outcome: 'ok', details: policies as unknown as Record<string, unknown> });
    let pushed: { ok: boolean; error?: string };
    try {
      await app.gateway.push();
      pushed = { ok: true };
    } catch (e) {
      pushed = { ok: false, error: (e as Error).message };
    }
    return { policies, gatewayPush: pushed };
  });
};
