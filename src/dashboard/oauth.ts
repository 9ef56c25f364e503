/**
 * The OAuth consent step: the owner, logged in on the dashboard (session cookie), approves or
 * denies the named client and the access it asks for. A server-rendered page under a strict CSP
 * (no script, no inline style); the form carries the session's CSRF token. Also the REST routes of
 * the MCP access page: GET /api/v1/oauth/clients and DELETE /api/v1/oauth/clients/:id.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.js';
import { ServiceError } from '../core/errors.js';
import { safeEqual } from '../core/crypto.js';
import { accessFromScope, describeAccess, DISCOVERY_TOOLSET, intersect, scopeFromAccess, TOOLSETS, type Access } from '../core/toolsets.js';
import { cleanClientName, OAUTH_PATHS, type ClientRecord, type OAuthStore, type PendingRequest } from '../services/access/index.js';
import { parseCookies, SESSION_COOKIE, type ApiRegistrar } from './routes.js';

function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/**
 * The CSP of the consent page: nothing but this document and a form posting to itself, then
 * redirecting to the client (browsers apply form-action to that redirect too). The redirect target
 * is its origin; a private-use scheme, or an IPv6 literal such as http://[::1]:PORT (CSP source
 * lists cannot name one: Chromium ignores it), is named by its scheme.
 */
function csp(redirectUri?: string): string {
  let target = '';
  if (redirectUri) {
    const u = new URL(redirectUri);
    target = (u.protocol === 'http:' || u.protocol === 'https:') && !u.hostname.startsWith('[') ? ` ${u.origin}` : ` ${u.protocol}`;
  }
  return `default-src 'none'; form-action 'self'${target}; frame-ancestors 'none'; base-uri 'none'`;
}

function page(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>${esc(title)} · Atelier</title></head><body><main><h1>${esc(title)}</h1>${body}</main></body></html>`;
}

/**
 * Referrer-Policy same-origin, not no-referrer: under no-referrer Chromium sends `Origin: null` with
 * the form's POST, which the origin guard refuses; same-origin still sends no Referer to the client.
 */
function send(reply: FastifyReply, status: number, html: string, redirectUri?: string): FastifyReply {
  return reply
    .code(status)
    .header('content-type', 'text/html; charset=utf-8')
    .header('cache-control', 'no-store')
    .header('content-security-policy', csp(redirectUri))
    .header('x-frame-options', 'DENY')
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'same-origin')
    .send(html);
}

/** The asked access as checkboxes: the owner may narrow it (never widen) before approving. */
function accessChoices(p: PendingRequest): string {
  const a = accessFromScope(p.scope);
  const sets = (a.toolsets === null ? Object.keys(TOOLSETS) : a.toolsets).filter((t) => t !== DISCOVERY_TOOLSET);
  const boxes = sets.map((t) => `<li><label><input type="checkbox" name="ts_${esc(t)}" value="on" checked> <strong>${esc(t)}</strong>: ${esc(TOOLSETS[t]!)}</label></li>`).join('');
  const ro = a.readOnly
    ? '<p>Read-only: only tools that change nothing (asked by the client).</p><input type="hidden" name="readonly" value="on">'
    : '<p><label><input type="checkbox" name="readonly" value="on"> Read-only: allow only tools that change nothing</label></p>';
  return `<fieldset><legend>Toolsets</legend><ul>${boxes}</ul></fieldset>${ro}`;
}

/** The access the owner approved: the asked access narrowed by the form's choices. */
export function chosenAccess(p: PendingRequest, body: Record<string, unknown>): Access {
  const asked = accessFromScope(p.scope);
  // The discovery toolset is always granted (src/core/toolsets.ts): no box, and not counted.
  const offered = (asked.toolsets ?? Object.keys(TOOLSETS)).filter((t) => t !== DISCOVERY_TOOLSET);
  const sets = offered.filter((t) => body[`ts_${t}`] === 'on');
  const chosen: Access = { toolsets: sets.length === Object.keys(TOOLSETS).length - 1 ? null : sets, readOnly: body.readonly === 'on' };
  return intersect(asked, chosen);
}

/**
 * Who asks, in words. A registered client is its self-chosen name and id. A metadata-document
 * client is its self-declared name and the host of its client_id URL: the host is what was
 * verified (the document came from it over HTTPS with a valid certificate), the name is not.
 */
function clientIntro(client: ClientRecord, resource: string): string {
  const name = `<bdi><strong>${esc(cleanClientName(client.name))}</strong></bdi>`;
  if (!client.metadataUrl)
    return `<p class="client">The client ${name} (its name is chosen by the client itself and not verified; id <code>${esc(client.id)}</code>, registered ${esc(client.createdAt)}) asks for access to <code>${esc(resource)}</code>. Untick what it should not get:</p>`;
  const host = new URL(client.metadataUrl).host;
  return `<p class="client">A client from <strong class="host">${esc(host)}</strong> asks for access to <code>${esc(resource)}</code>. It calls itself ${name}.</p>
<p>Verified: its metadata document was fetched over HTTPS from <code>${esc(host)}</code>, at <code>${esc(client.metadataUrl)}</code>, so whoever controls that host published this client. Not verified: the name, which the document declares itself. Untick what it should not get:</p>`;
}

export function registerConsent(f: FastifyInstance, app: App, store: OAuthStore): void {
  const sessionOf = (req: FastifyRequest) => {
    const id = parseCookies(req.headers.cookie)[SESSION_COOKIE];
    return id ? app.auth.getSession(id) : null;
  };

  f.get(OAUTH_PATHS.consent, async (req, reply) => {
    const id = (req.query as Record<string, unknown>).request;
    const pending = typeof id === 'string' ? store.pending(id) : null;
    if (!pending || typeof id !== 'string') return send(reply, 400, page('Authorization request not valid', '<p>This authorization request is unknown or expired (10 minutes). Start the connection again from your MCP client.</p>'));
    const client = store.client(pending.clientId);
    if (!client || client.revokedAt) return send(reply, 400, page('Authorization request not valid', '<p>The client of this request was revoked.</p>'));
    const s = sessionOf(req);
    if (!s) {
      // The session cookie is SameSite=Strict, so it is not sent on the navigation that came from
      // the client's site; a click on this same-site link sends it.
      const self = `${OAUTH_PATHS.consent}?request=${encodeURIComponent(id)}`;
      return send(
        reply,
        200,
        page(
          'Owner login needed',
          `<p>An MCP client asks to connect to this Atelier. Only the owner can approve it.</p><p>If you are logged in to the dashboard already, <a href="${esc(self)}">continue to the approval</a>. Otherwise <a href="/" target="_blank" rel="noopener">log in to the dashboard</a> in another tab, then <a href="${esc(self)}">continue</a>.</p>`,
        ),
      );
    }
    const redirectHost = new URL(pending.redirectUri);
    return send(
      reply,
      200,
      page(
        'Connect an MCP client?',
        `${clientIntro(client, pending.resource)}
<p>After approval you return to <code>${esc(redirectHost.protocol === 'http:' || redirectHost.protocol === 'https:' ? redirectHost.origin + redirectHost.pathname : pending.redirectUri)}</code>. Approve only a client you just started connecting yourself.</p>
<form method="post" action="${OAUTH_PATHS.consent}"><input type="hidden" name="request" value="${esc(id)}"><input type="hidden" name="csrf" value="${esc(s.csrf)}">${accessChoices(pending)}
<button type="submit" name="decision" value="approve">Approve</button> <button type="submit" name="decision" value="deny">Deny</button></form>`,
      ),
      pending.redirectUri,
    );
  });

  f.post(OAUTH_PATHS.consent, async (req, reply) => {
    const s = sessionOf(req);
    const body = (req.body ?? {}) as Record<string, unknown>;
    const id = typeof body.request === 'string' ? body.request : '';
    const csrf = typeof body.csrf === 'string' ? body.csrf : '';
    if (!s) return send(reply, 401, page('Owner login needed', '<p>Log in to the dashboard, then start the connection again.</p>'));
    if (!safeEqual(csrf, s.csrf)) return send(reply, 403, page('Request refused', '<p>Missing or wrong CSRF token. Reload the approval page.</p>'));
    const pending = id ? store.takePending(id) : null;
    if (!pending) return send(reply, 400, page('Authorization request not valid', '<p>This authorization request is unknown, expired or already answered.</p>'));
    const client = store.client(pending.clientId);
    if (!client || client.revokedAt) return send(reply, 400, page('Authorization request not valid', '<p>The client of this request was revoked.</p>'));
    const issuer = app.config.publicOrigin || `http://${req.headers.host}`;
    const u = new URL(pending.redirectUri);
    if (body.decision === 'approve') {
      const access = chosenAccess(pending, body);
      if (access.toolsets !== null && access.toolsets.length === 0) return send(reply, 400, page('Nothing approved', '<p>Tick at least one toolset, or deny the request.</p>'));
      pending.scope = scopeFromAccess(access);
      const code = store.approve(pending);
      u.searchParams.set('code', code);
      app.audit.record({ actor: 'dashboard', action: 'oauth_consent', target: client.id, outcome: 'ok', details: { client: cleanClientName(client.name), ...(client.metadataUrl ? { url: client.metadataUrl } : {}), access: describeAccess(access) } });
    } else {
      u.searchParams.set('error', 'access_denied');
      u.searchParams.set('error_description', 'the owner denied the request');
      app.audit.record({ actor: 'dashboard', action: 'oauth_consent', target: client.id, outcome: 'refused', reason: 'denied by the owner' });
    }
    if (pending.state !== undefined) u.searchParams.set('state', pending.state);
    u.searchParams.set('iss', issuer);
    reply.header('content-security-policy', csp(pending.redirectUri)).header('cache-control', 'no-store').header('referrer-policy', 'no-referrer');
    return reply.redirect(u.toString(), 303);
  });
}

/** GET /api/v1/oauth/clients, DELETE /api/v1/oauth/clients/:id (the dashboard's MCP access page). */
export function oauthClientRoutes(store: OAuthStore): ApiRegistrar {
  return (api, app) => {
    api.get('/oauth/clients', async () => ({
      clients: store.connectedClients().map((c) => ({
        id: c.id,
        name: cleanClientName(c.name),
        // A metadata-document client: the URL it presents as client_id, and its host (verified).
        metadataUrl: c.metadataUrl,
        host: c.metadataUrl ? new URL(c.metadataUrl).host : null,
        redirectUris: c.redirectUris,
        createdAt: c.createdAt,
        lastUsedAt: c.lastUsedAt,
        grants: c.grants.map((g) => ({ id: g.id, createdAt: g.createdAt, resource: g.resource, scope: g.scope, access: describeAccess(accessFromScope(g.scope)) })),
      })),
    }));
    api.delete('/oauth/clients/:id', async (req) => {
      const id = (req.params as { id: string }).id;
      if (!/^oauthc_[A-Za-z0-9_-]{1,64}$/.test(id)) throw new ServiceError('INVALID_ARGUMENT', 'id: not an OAuth client id (oauthc_…)', { field: 'id' });
      if (!store.revokeClient(id)) throw new ServiceError('NOT_FOUND', `no connected OAuth client ${id}`, { field: 'id' });
      app.audit.record({ actor: 'dashboard', action: 'oauth_client_revoke', target: id, outcome: 'ok' });
      return { id, revoked: true };
    });
  };
}
