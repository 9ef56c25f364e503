/**
 * Dashboard REST for owner approvals of every kind (owner session + CSRF), through the approvals
 * service:
 *   GET  /api/v1/approvals[?state=pending][&kind=privileged_command]   requests, newest first, full subject text
 *   GET  /api/v1/approvals/:id
 *   POST /api/v1/approvals/:id/approve          -> { approvalGrantToken (shown once), expiresAt }
 *   POST /api/v1/approvals/:id/deny
 */
import type { ApiRegistrar } from './routes.js';
import { ServiceError } from '../core/errors.js';
import { APPROVAL_KINDS, APPROVAL_STATES, type ApprovalKind, type ApprovalState } from '../services/approvals.js';

export const approvalRoutes: ApiRegistrar = (api, app) => {
  api.get('/approvals', async (req) => {
    const q = req.query as Record<string, string | undefined>;
    if (q.state !== undefined && !(APPROVAL_STATES as readonly string[]).includes(q.state))
      throw new ServiceError('INVALID_ARGUMENT', `state: must be one of ${APPROVAL_STATES.join(', ')}`, { field: 'state' });
    if (q.kind !== undefined && !(APPROVAL_KINDS as readonly string[]).includes(q.kind))
      throw new ServiceError('INVALID_ARGUMENT', `kind: must be one of ${APPROVAL_KINDS.join(', ')}`, { field: 'kind' });
    return { approvals: app.approvals.list({ state: q.state as ApprovalState | undefined, kind: q.kind as ApprovalKind | undefined }) };
  });
  api.get<{ Params: { id: string } }>('/approvals/:id', async (req) => app.approvals.get(req.params.id));
  api.post<{ Params: { id: string } }>('/approvals/:id/approve', async (req) => app.approvals.decide(req.params.id, true));
  api.post<{ Params: { id: string } }>('/approvals/:id/deny', async (req) => app.approvals.decide(req.params.id, false));
};
