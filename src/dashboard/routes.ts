/**
 * Dashboard foundation: owner login (password from `atelier owner set-password`, or a one-time
 * link printed at start), an HttpOnly SameSite=Strict session cookie, CSRF on every
 * state-changing request, and the /api/v1 router behind that session.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.js';
import { ServiceError, errorEnvelope } from '../core/errors.js';
import { safeEqual } from '../core/crypto.js';
import { VERSION } from '../core/version.js';
import { SESSION_TTL_MS } from '../services/access/index.js';
import type { DashboardSession } from '../services/access/index.js';
import { CSP, registerAssets } from './assets.js';
import { addressKey, type Refusal } from '../services/access/index.js';
import { clientAddress } from '../core/client-address.js';

export const SESSION_COOKIE = 'atelier_session';

export function parseCookies(header: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0) continue;
    const k = part.slice(0, eq).trim();
    const v = part.slice(eq + 1).trim();
    try {
      out[k] = decodeURIComponent(v);
    } catch {
      out[k] = v;
    }
  }
  return out;
}

declare module 'fastify' {
  interface FastifyRequest {
    dashboard?: DashboardSession & { sessionId: string };
  }
}

export function sendError(reply: FastifyReply, err: unknown): FastifyReply {
  const { status, body } = errorEnvelope(err);
  return reply.code(status).header('content-type', 'application/json').send(body);
}

const STATE_CHANGING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** Routes that live under /api/v1 register through this; they run only with a valid session (and CSRF token when they change state). */
export type ApiRegistrar = (api: FastifyInstance, app: App) => void;

export function registerDashboard(f: FastifyInstance, app: App, apiRoutes: ApiRegistrar[]): void {
  const secure = app.config.publicOrigin.startsWith('https://');
  const cookie = (value: string, maxAgeS: number) =>
    `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${secure ? '; Secure' : ''}`;

  const sessionOf = (req: FastifyRequest) => {
    const id = parseCookies(req.headers.cookie)[SESSION_COOKIE];
    if (!id) return null;
    const s = app.auth.getSession(id);
    return s ? { ...s, sessionId: id } : null;
  };

  const startSession = (reply: FastifyReply) => {
    const s = app.auth.createSession();
    reply.header('set-cookie', cookie(s.sessionId, Math.floor(SESSION_TTL_MS / 1000)));
    return s;
  };

  // Version and schema version too (issue #35 item 3): what an upgrade check reads.
  f.get('/healthz', async () => ({ status: 'ok', version: VERSION, schema: app.schemaVersion }));

  // Every page and asset answers with a strict Content-Security-Policy: only this origin's own
  // script and style files, no inline script, no framing (see docs/dashboard.md). A page that sets
  // its own (the OAuth consent page, whose form must reach the client's redirect URI, and the
  // authorization errors) keeps it: these headers are defaults, never a replacement.
  f.addHook('onSend', async (req, reply) => {
    if (req.url.startsWith('/api/') || req.url === '/mcp') return;
    const defaults: Array<[string, string]> = [
      ['content-security-policy', CSP],
      ['x-content-type-options', 'nosniff'],
      ['x-frame-options', 'DENY'],
      ['referrer-policy', 'same-origin'],
    ];
    for (const [name, value] of defaults) if (!reply.hasHeader(name)) reply.header(name, value);
  });

  registerAssets(f);

  f.get('/', async (req, reply) => {
    const s = sessionOf(req);
    reply.header('content-type', 'text/html; charset=utf-8').header('cache-control', 'no-store');
    const login = (req.query as Record<string, string | undefined>).login;
    // After a throttled form post: the delay or lockout as it stands now (a busy or concurrent refusal is not kept: a generic line).
    const throttled = login === 'throttled' ? (app.loginThrottle.refusal(addressKey(clientAddress(req.raw, app.config.trustedProxies))) ?? { reason: 'busy', scope: 'service', until: Date.now() + 1000 }) : null;
    if (!s) return reply.send(loginPage(app.auth.hasPassword(), login === 'failed', throttled));
    return reply.send(appShell());
  });

  // One approval request's own page (docs/dashboard.md): the URL an MCP client opens for its user when a
  // call waits for the owner's approval (docs/mcp-tasks.md). The app shows it on the approvals page.
  f.get<{ Params: { id: string } }>('/approvals/:id', async (req, reply) => {
    reply.header('cache-control', 'no-store');
    if (!/^apr_[A-Za-z0-9_-]{1,100}$/.test(req.params.id)) return reply.code(404).header('content-type', 'text/html; charset=utf-8').send(page('No such approval request', '<p>This is not the address of an approval request.</p><p><a href="/#/approvals">Approvals</a></p>'));
    return reply.redirect(`/#/approvals/${req.params.id}`, 302);
  });

  // One-time login link printed at start: consumes the link, starts a session, redirects home.
  f.get('/login', async (req, reply) => {
    const token = (req.query as Record<string, string | undefined>).token;
    reply.header('cache-control', 'no-store').header('referrer-policy', 'no-referrer');
    if (!token || !app.auth.consumeLoginLink(token)) {
      app.audit.record({ actor: 'dashboard', action: 'login_link', outcome: 'refused', reason: 'unknown, used or expired link' });
      return reply.code(401).header('content-type', 'text/html; charset=utf-8').send(page('Login link not valid', '<p>This login link is unknown, used or expired. Start the service again for a new one, or log in with the owner password.</p><p><a href="/">Log in</a></p>'));
    }
    startSession(reply);
    app.audit.record({ actor: 'dashboard', action: 'login_link', outcome: 'ok' });
    return reply.redirect('/', 303);
  });

  // Password login, throttled (src/services/access/login-throttle.ts, docs/operations.md): per address and
  // overall, growing delays then a lockout; one check per address at a time and a bounded queue of
  // scrypt checks. A refused attempt runs no check. The one-time link above is never throttled.
  f.post('/login', async (req, reply) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const password = typeof body.password === 'string' ? body.password : '';
    const form = (req.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded');
    const ip = clientAddress(req.raw, app.config.trustedProxies);
    const address = addressKey(ip);
    // An empty or over-long password (set-password takes at most 1024 characters) is a failure
    // without a check, throttled and counted like any other.
    const plausible = password.length > 0 && password.length <= 1024;
    const result = await app.loginThrottle.attempt(ip, async () => plausible && (await app.auth.checkPassword(password)));
    if (result.outcome === 'refused') {
      const retryAfter = Math.max(1, Math.ceil((result.until - Date.now()) / 1000));
      reply.header('retry-after', String(retryAfter));
      if (form) return reply.redirect('/?login=throttled', 303);
      return sendError(reply, throttleError(result, retryAfter));
    }
    if (result.outcome === 'wrong') {
      app.audit.record({ actor: 'dashboard', action: 'login', target: address, outcome: 'refused', reason: 'wrong password or no password set' });
      if (form) return reply.redirect('/?login=failed', 303);
      return sendError(reply, new ServiceError('UNAUTHENTICATED', 'wrong password, or no owner password is set (run `atelier owner set-password`)', { field: 'password' }));
    }
    const s = startSession(reply);
    app.audit.record({ actor: 'dashboard', action: 'login', target: address, outcome: 'ok' });
    if (form) return reply.redirect('/', 303);
    return { csrfToken: s.csrf, expiresAt: s.expiresAt };
  });

  f.post('/logout', async (req, reply) => {
    const s = sessionOf(req);
    const body = (req.body ?? {}) as Record<string, unknown>;
    const csrf = (req.headers['x-csrf-token'] as string | undefined) ?? (typeof body.csrf === 'string' ? body.csrf : '');
    if (!s || !safeEqual(csrf, s.csrf)) return sendError(reply, new ServiceError('PERMISSION_DENIED', 'missing or wrong CSRF token', { field: 'x-csrf-token' }));
    app.auth.endSession(s.sessionId);
    reply.header('set-cookie', cookie('', 0));
    if ((req.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded')) return reply.redirect('/', 303);
    return { ok: true };
  });

  f.register(
    async (api) => {
      api.addHook('onRequest', async (req, reply) => {
        const s = sessionOf(req);
        if (!s) return sendError(reply, new ServiceError('UNAUTHENTICATED', 'a dashboard session is required: log in at / first', {}));
        if (STATE_CHANGING.has(req.method)) {
          const csrf = req.headers['x-csrf-token'];
          if (typeof csrf !== 'string' || !safeEqual(csrf, s.csrf))
            return sendError(reply, new ServiceError('PERMISSION_DENIED', 'missing or wrong CSRF token: send the X-CSRF-Token header from GET /api/v1/session', { field: 'x-csrf-token' }));
        }
        req.dashboard = s;
      });
      api.setErrorHandler((err, _req, reply) => {
        if (err instanceof ServiceError) return sendError(reply, err);
        const e = err as { statusCode?: number; message?: string };
        if (e.statusCode && e.statusCode < 500)
          return sendError(reply, new ServiceError('INVALID_ARGUMENT', `request body: ${e.message ?? 'invalid'}`, {}));
        app.log.error({ err }, 'dashboard API failure');
        return sendError(reply, err);
      });
      api.setNotFoundHandler((req, reply) => sendError(reply, new ServiceError('NOT_FOUND', `no API route ${req.method} ${req.url}`, {})));

      api.get('/session', async (req) => ({ owner: req.dashboard!.ownerId, csrfToken: req.dashboard!.csrf, expiresAt: req.dashboard!.expiresAt }));

      api.get('/audit-log', async (req) => {
        const q = req.query as Record<string, string | undefined>;
        const limit = q.limit === undefined ? 100 : Number(q.limit);
        if (!Number.isInteger(limit) || limit < 1 || limit > 500) throw new ServiceError('INVALID_ARGUMENT', 'limit: must be an integer from 1 to 500', { field: 'limit' });
        let beforeSeq: number | undefined;
        if (q.cursor) beforeSeq = app.cursors.decode<{ s: number }>('audit', q.cursor).s;
        const time = (f: 'since' | 'until') => {
          const v = q[f];
          if (v === undefined || v === '') return undefined;
          if (Number.isNaN(Date.parse(v))) throw new ServiceError('INVALID_ARGUMENT', `${f}: must be an ISO 8601 time`, { field: f });
          return new Date(v).toISOString();
        };
        if (q.outcome && !['ok', 'refused', 'failed'].includes(q.outcome)) throw new ServiceError('INVALID_ARGUMENT', 'outcome: must be ok, refused or failed', { field: 'outcome' });
        const rows = app.audit.list({ limit, beforeSeq, actor: q.actor || undefined, action: q.action || undefined, outcome: q.outcome || undefined, target: q.target || undefined, since: time('since'), until: time('until') });
        const last = rows[rows.length - 1];
        return { entries: rows, nextCursor: rows.length === limit && last ? app.cursors.encode('audit', { s: last.seq }) : null };
      });

      for (const register of apiRoutes) register(api, app);
    },
    { prefix: '/api/v1' },
  );
}

function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

function page(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>${esc(title)} · Atelier</title>
<link rel="icon" href="data:,"><link rel="stylesheet" href="/assets/app.css"></head>
<body class="plain"><main class="login"><h1>${esc(title)}</h1>${body}</main></body></html>`;
}

/** The answer to a throttled password login: 429 (a delay or lockout, or a check from this address already running) or 503 (busy). */
function throttleError(r: Refusal, retryAfter: number): ServiceError {
  const details = { field: 'password', rule: r.reason === 'busy' ? 'bounded concurrent password checks' : 'login throttle', reason: r.reason, scope: r.scope, retryAfterSeconds: retryAfter, until: new Date(r.until).toISOString() };
  return new ServiceError(r.reason === 'busy' ? 'UNAVAILABLE' : 'RESOURCE_EXHAUSTED', `password: ${throttleText(r)}; no password was checked. ${LINK_HINT}`, details);
}

const LINK_HINT = 'The one-time login link still works: run `atelier owner login-link` on the machine.';

function throttleText(r: Refusal): string {
  const until = new Date(r.until).toISOString().slice(11, 19) + ' UTC';
  switch (r.reason) {
    case 'lockout':
      return `too many failed logins ${r.scope === 'overall' ? 'from all addresses: password login is locked for everyone' : 'from this address: password login is locked for it'} until ${until}`;
    case 'delay':
      return `too many failed logins ${r.scope === 'overall' ? 'from all addresses' : 'from this address'}: try again after ${until}`;
    case 'concurrent':
      return 'a password check from this address is already running: wait for its answer';
    default:
      return 'too many password checks are running: try again in a moment';
  }
}

function loginPage(hasPassword: boolean, failed: boolean, throttled: Refusal | null): string {
  const hint = hasPassword
    ? ''
    : '<p class="muted">No owner password is set yet. Use the one-time login link printed when the service started, or run <code>atelier owner set-password</code>.</p>';
  const err = failed
    ? '<p class="error" role="alert">Wrong password, or no owner password is set.</p>'
    : throttled
      ? `<p class="error" role="alert">${esc(throttleText(throttled))}. No password was checked.</p><p class="muted">The one-time login link still works: run <code>atelier owner login-link</code> on the machine.</p>`
      : '';
  return page(
    'Atelier',
    `${err}${hint}<form method="post" action="/login" class="stack"><label>Owner password <input type="password" name="password" autocomplete="current-password" required></label><button type="submit" class="primary">Log in</button></form>`,
  );
}

function appShell(): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>Atelier</title>
<link rel="icon" href="data:,"><link rel="stylesheet" href="/assets/app.css"><script type="module" src="/assets/app.js"></script></head>
<body><div id="app"><noscript>The dashboard needs JavaScript; the REST API is under /api/v1.</noscript></div></body></html>`;
}
