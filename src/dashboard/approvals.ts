/**
 * Dashboard REST for privileged-command approvals (owner session + CSRF):
 *   GET  /api/v1/approvals[?state=pending]     requests, newest first
 *   POST /api/v1/approvals/:id/approve          -> { approvalGrantToken (shown once), expiresAt }
 *   POST /api/v1/approvals/:id/deny
 */
import type { ApiRegistrar } from './routes.js';
import { ServiceError } from '../core/errors.js';

const STATES = ['pending', 'approved', 'denied', 'used', 'expired'];

export const approvalRoutes: ApiRegistrar = (api, app) => {
  api.get('/approvals', async (req) => {
    const state = (req.query as Record<string, string | undefined>).state;
    if (state !== undefined && !STATES.includes(state)) throw new ServiceError('INVALID_ARGUMENT', `state: must be one of ${STATES.join(', ')}`, { field: 'state' });
    return { approvals: app.commands.listApprovals(state) };
  });
  api.post<{ Params: { id: string } }>('/approvals/:id/approve', async (req) => app.commands.decide(req.params.id, true));
  api.post<{ Params: { id: string } }>('/approvals/:id/deny', async (req) => app.commands.decide(req.params.id, false));
};
