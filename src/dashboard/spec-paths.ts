/**
 * The dashboard REST paths the spec names. Each is the same logic as its MCP counterpart
 * (one service, two transports); until its issue lands it answers the structured
 * NOT_IMPLEMENTED error, like the tools.
 */
import type { ApiRegistrar } from './routes.js';
import { notImplemented } from '../core/errors.js';

export const SPEC_REST_PATHS: Array<{ method: 'GET' | 'POST' | 'PATCH'; path: string; issue: string }> = [
  { method: 'GET', path: '/model-providers', issue: '#7 model control plane' },
  { method: 'GET', path: '/provider-credentials', issue: '#7 model control plane' },
  { method: 'GET', path: '/model-catalog', issue: '#7 model control plane' },
  { method: 'POST', path: '/model-connection/verify', issue: '#7 model control plane' },
  { method: 'POST', path: '/agent-model-profiles/validate', issue: '#7 model control plane' },
  { method: 'POST', path: '/agent-model-profiles', issue: '#7 model control plane' },
  { method: 'PATCH', path: '/agent-model-profiles', issue: '#7 model control plane' },
  { method: 'POST', path: '/agent-model-profiles/:id/activate', issue: '#7 model control plane' },
  { method: 'GET', path: '/model-spend', issue: '#8 gateway and spend' },
  { method: 'GET', path: '/agent-model-config-status', issue: '#7 model control plane' },
];

/** Registers every spec path not already served by a real registrar. */
export function pendingSpecPaths(served: Set<string>): ApiRegistrar {
  return (api) => {
    for (const p of SPEC_REST_PATHS) {
      const key = `${p.method} ${p.path}`;
      if (served.has(key)) continue;
      api.route({
        method: p.method,
        url: p.path,
        handler: async () => {
          throw notImplemented(`${p.method} /api/v1${p.path}`, p.issue);
        },
      });
    }
  };
}
