/**
 * Dashboard REST paths the owner's pages need beyond the spec's table (owner session; CSRF on
 * changes, see routes.ts). Each runs the same service code as the CLI and MCP tools:
 *   GET    /api/v1/overview                        what waits for the owner + spend today/month + counts
 *   GET    /api/v1/workspaces[?cursor=&limit=]     open workspaces (workspace_list)
 *   POST   /api/v1/workspaces/:id/close            (workspace_close)
 *   GET    /api/v1/tokens                          MCP owner tokens (metadata; never a token)
 *   POST   /api/v1/tokens                          { name } -> 201 { token (shown once), info }
 *   DELETE /api/v1/tokens/:id                      revoke
 *   GET    /api/v1/mcp-setup                       the `claude mcp add` and Codex config.toml lines
 *   GET    /api/v1/spend-series?range=month|year   spend per UTC day / month by profile and agent
 *   GET    /api/v1/repository-rules                allow and deny rules, extra CA certificates
 *   POST   /api/v1/repository-rules                { list: allow|deny, rule }
 *   DELETE /api/v1/repository-rules                { rule }
 *   POST   /api/v1/ca-certificates                 { pem } -> stored under <data>/ca, added to the config
 *   DELETE /api/v1/ca-certificates                 { path }
 *   GET    /api/v1/agent-model-profiles/:id/revisions   revision history (for the diff)
 */
import { createHash, X509Certificate } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { FastifyRequest } from 'fastify';
import type { ApiRegistrar } from './routes.js';
import { ServiceError } from '../core/errors.js';
import { ConfigError } from '../core/config.js';
import { editExtraCaCertificates, editRepositorySettings, validateRule } from '../services/repos/index.js';

function body(req: { body: unknown }): Record<string, unknown> {
  const b = req.body;
  if (b === undefined || b === null) return {};
  if (typeof b !== 'object' || Array.isArray(b)) throw new ServiceError('INVALID_ARGUMENT', 'request body: must be a JSON object', {});
  return b as Record<string, unknown>;
}

function str(b: Record<string, unknown>, field: string, max = 10_000): string {
  const v = b[field];
  if (typeof v !== 'string' || v.length === 0) throw new ServiceError('INVALID_ARGUMENT', `${field}: is required and must be a non-empty string`, { field });
  if (v.length > max) throw new ServiceError('INVALID_ARGUMENT', `${field}: must be at most ${max} characters`, { field });
  return v;
}

function intQuery(q: Record<string, string | undefined>, field: string, def: number, min: number, max: number): number {
  const raw = q[field];
  if (raw === undefined) return def;
  const n = /^\d{1,6}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isInteger(n) || n < min || n > max) throw new ServiceError('INVALID_ARGUMENT', `${field}: must be an integer from ${min} to ${max}`, { field });
  return n;
}

/** The instance's public base URL as the owner's browser sees it (Host is checked by the origin guard). */
export function baseUrl(publicOrigin: string, req: FastifyRequest): string {
  if (publicOrigin) return publicOrigin.replace(/\/+$/, '');
  return `http://${req.headers.host ?? 'localhost'}`;
}

const configError = (e: unknown, field: string) =>
  e instanceof ConfigError ? new ServiceError('INVALID_ARGUMENT', `${field}: ${e.message.replace(/^argument: /, '')}`, { field }) : e;

export const ownerRoutes: ApiRegistrar = (api, app) => {
  const audit = (action: string, target: string | null, details?: Record<string, unknown>) => app.audit.record({ actor: 'dashboard', action, target, outcome: 'ok', details });

  // ---- overview ----
  api.get('/overview', async (req) => {
    const q = req.query as Record<string, string | undefined>;
    const since = q.since && !Number.isNaN(Date.parse(q.since)) ? new Date(q.since).toISOString() : undefined;
    await app.gateway.syncUsage().catch(() => undefined);
    const profiles = (app.models.list() as { profiles: Array<Record<string, unknown>> }).profiles;
    const drafts = profiles.filter((p) => p.pendingOwnerApproval === true).map((p) => ({ profileId: p.profileId, status: p.status, latestRevision: p.latestRevision, activeRevision: p.activeRevision, model: p.model }));
    const refusals = app.audit.list({ limit: 20, outcome: 'refused', reasonPrefix: 'OWNER_APPROVAL_REQUIRED', since });
    const pending = app.approvals.list({ state: 'pending' });
    const ws = app.workspaces.list(undefined, 100) as { workspaces: Array<Record<string, unknown>> };
    const p = app.gateway.push_;
    return {
      attention: { approvals: pending, profileDrafts: drafts, refusals },
      spend: app.spend.summary(),
      workspaces: { active: ws.workspaces.filter((w) => w.state === 'active').length, total: ws.workspaces.length },
      gatewayPush: { lastAttemptAt: p.lastAttemptAt, lastSuccessAt: p.lastSuccessAt, lastError: p.lastError, generation: p.generation },
      providerCredentials: app.models.listCredentials().length,
      profiles: { total: profiles.length, active: profiles.filter((x) => x.status === 'active').length },
      // Password login throttling: delays, lockouts per address and overall (src/services/access/login-throttle.ts).
      login: app.loginThrottle.view(),
      asOf: new Date().toISOString(),
    };
  });

  // ---- workspaces ----
  api.get('/workspaces', async (req) => {
    const q = req.query as Record<string, string | undefined>;
    return app.workspaces.list(q.cursor || undefined, intQuery(q, 'limit', 50, 1, 100));
  });
  api.post<{ Params: { id: string } }>('/workspaces/:id/close', async (req) => {
    const r = await app.workspaces.close(req.params.id);
    audit('workspace_close', req.params.id);
    return r;
  });

  // ---- MCP owner tokens ----
  api.get('/tokens', async () => ({ tokens: app.auth.listTokens() }));
  api.post('/tokens', async (req, reply) => {
    const name = str(body(req), 'name', 80);
    const { token, info } = app.auth.createToken(name);
    audit('token_create', info.id);
    return reply.code(201).send({ token, info });
  });
  api.delete<{ Params: { id: string } }>('/tokens/:id', async (req) => {
    const t = app.auth.revokeToken(req.params.id);
    audit('token_revoke', t.id);
    return { token: t };
  });
  api.get('/mcp-setup', async (req) => {
    const url = `${baseUrl(app.config.publicOrigin, req)}/mcp`;
    return {
      mcpUrl: url,
      claude: `claude mcp add --transport http atelier ${url} --header "Authorization: Bearer $ATELIER_TOKEN"`,
      codexToml: `[mcp_servers.atelier]\nurl = "${url}"\nbearer_token_env_var = "ATELIER_TOKEN"`,
      note: 'Set ATELIER_TOKEN to an owner token (created on this page, shown once) in the environment of the client.',
    };
  });

  // ---- spend series ----
  api.get('/spend-series', async (req) => {
    const r = (req.query as Record<string, string | undefined>).range ?? 'month';
    if (r !== 'month' && r !== 'year') throw new ServiceError('INVALID_ARGUMENT', 'range: must be month or year', { field: 'range' });
    await app.gateway.syncUsage().catch(() => undefined);
    return { ...app.spend.series(r), unit: 'micro-USD', estimate: true, note: 'Figures are estimates from pinned profile prices, not provider invoices.' };
  });

  // ---- repository rules and CA certificates (the config file, like `atelier repos`) ----
  const file = app.config.configPath;
  const rules = () => {
    const s = app.repos.settings();
    return { allow: s.allow, deny: s.deny, extraCaCertificates: s.extraCaCertificates.map(describeCa), configFile: file };
  };
  api.get('/repository-rules', async () => rules());
  api.post('/repository-rules', async (req) => {
    const b = body(req);
    const list = b.list;
    if (list !== 'allow' && list !== 'deny') throw new ServiceError('INVALID_ARGUMENT', 'list: must be "allow" or "deny"', { field: 'list' });
    const rule = str(b, 'rule', 2000).trim();
    try {
      validateRule(rule, 'rule');
    } catch (e) {
      throw configError(e, 'rule');
    }
    editRepositorySettings(file, (s) => {
      s.allow = s.allow.filter((x) => x !== rule);
      s.deny = s.deny.filter((x) => x !== rule);
      (list === 'allow' ? s.allow : s.deny).push(rule);
    });
    audit(`repository_${list}`, rule);
    return rules();
  });
  api.delete('/repository-rules', async (req) => {
    const rule = str(body(req), 'rule', 2000);
    let found = false;
    editRepositorySettings(file, (s) => {
      found = s.allow.includes(rule) || s.deny.includes(rule);
      s.allow = s.allow.filter((x) => x !== rule);
      s.deny = s.deny.filter((x) => x !== rule);
    });
    if (!found) throw new ServiceError('NOT_FOUND', `rule: no allow or deny rule ${JSON.stringify(rule)}`, { field: 'rule' });
    audit('repository_rule_remove', rule);
    return rules();
  });

  const caDir = join(app.dataDir, 'ca');
  api.post('/ca-certificates', async (req) => {
    const pem = str(body(req), 'pem', 64 * 1024).trim();
    const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g);
    if (!blocks || blocks.join('\n').replace(/\s/g, '') !== pem.replace(/\s/g, ''))
      throw new ServiceError('INVALID_ARGUMENT', 'pem: must be one or more PEM certificates (-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----) and nothing else', { field: 'pem' });
    for (const b of blocks) {
      try {
        const c = new X509Certificate(b);
        if (!c.ca) throw new Error('not a CA certificate (basicConstraints CA:FALSE)');
      } catch (e) {
        throw new ServiceError('INVALID_ARGUMENT', `pem: not a usable CA certificate: ${(e as Error).message}`, { field: 'pem' });
      }
    }
    mkdirSync(caDir, { recursive: true, mode: 0o755 });
    const path = join(caDir, `${createHash('sha256').update(pem).digest('hex').slice(0, 16)}.pem`);
    writeFileSync(path, pem + '\n', { mode: 0o644 });
    editExtraCaCertificates(file, (l) => (l.includes(path) ? l : [...l, path]));
    audit('ca_certificate_add', path);
    return rules();
  });
  api.delete('/ca-certificates', async (req) => {
    const path = str(body(req), 'path', 4096);
    let found = false;
    editExtraCaCertificates(file, (l) => {
      found = l.includes(path);
      return l.filter((x) => x !== path);
    });
    if (!found) throw new ServiceError('NOT_FOUND', `path: no extra CA certificate ${JSON.stringify(path)}`, { field: 'path' });
    // Only files the dashboard stored are removed; an operator's own file is left in place.
    if (dirname(resolve(path)) === resolve(caDir) && existsSync(path)) unlinkSync(path);
    audit('ca_certificate_remove', path);
    return rules();
  });

  // ---- profile history ----
  api.get<{ Params: { id: string } }>('/agent-model-profiles/:id/revisions', async (req) => {
    const refusals = app.audit.list({ limit: 50, outcome: 'refused', reasonPrefix: 'OWNER_APPROVAL_REQUIRED', target: req.params.id });
    return { profileId: req.params.id, revisions: app.models.revisions(req.params.id), refusedEscalations: refusals.map((r) => ({ at: r.at, actor: r.actor, principal: r.principal, action: r.action, reason: r.reason })) };
  });
};

function describeCa(path: string): Record<string, unknown> {
  try {
    const pem = readFileSync(path, 'utf8');
    const c = new X509Certificate(pem);
    return { path, subject: c.subject, issuer: c.issuer, validTo: c.validTo, fingerprint256: c.fingerprint256 };
  } catch (e) {
    return { path, error: (e as Error).message };
  }
}
