/**
 * OAuth 2.1 endpoints of the runner's authorization server (MCP authorization spec):
 *   GET  /.well-known/oauth-protected-resource[/mcp]  RFC 9728 (built by the MCP SDK's helper)
 *   GET  /.well-known/oauth-authorization-server      RFC 8414
 *   POST /oauth/register                              RFC 7591 dynamic client registration
 *   GET  /oauth/authorize                             code flow, PKCE S256 only, exact redirect URI;
 *                                                     a client_id may be a Client ID Metadata Document URL (cimd.ts)
 *   POST /oauth/token                                 authorization_code, refresh_token (rotated)
 *   POST /oauth/revoke                                RFC 7009
 * The consent step (the owner, logged in on the dashboard) is src/dashboard/oauth.ts.
 */
import { readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { buildOAuthProtectedResourceMetadata, getOAuthProtectedResourceMetadataUrl } from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { App } from '../../app.js';
import { ServiceError } from '../../core/errors.js';
import { ConfigError } from '../../core/config.js';
import { clientAddress } from '../../core/client-address.js';
import { accessFromScope, scopesSupported, scopeFromAccess } from '../../core/toolsets.js';
import { cleanClientName, isMetadataUrlClientId, OAUTH_PATHS, OAuthFailure, type ClientRecord, type OAuthStore } from '../../services/access/index.js';
import { redirectUriProblem } from './redirect-uris.js';
import { CimdAddressLimit, CimdClients, CimdFailure, CimdFetcher } from './cimd.js';

/** Paths a browser-based client (the MCP Inspector) calls cross-origin: no cookies, CORS open. */
export const OAUTH_CORS_PATHS = new Set([
  '/.well-known/oauth-protected-resource',
  '/.well-known/oauth-protected-resource/mcp',
  '/.well-known/oauth-authorization-server',
  OAUTH_PATHS.register,
  OAUTH_PATHS.token,
  OAUTH_PATHS.revoke,
]);

/** The origin clients reach this instance at: the public origin, else the (guarded) Host of the request. */
export function issuerOf(app: App, host: string | undefined): string {
  return app.config.publicOrigin || `http://${host ?? `127.0.0.1:${app.config.port}`}`;
}

export function resourceOf(issuer: string): string {
  return `${issuer}/mcp`;
}

export function resourceMetadataUrl(issuer: string): string {
  return getOAuthProtectedResourceMetadataUrl(new URL(resourceOf(issuer)));
}

export function authorizationServerMetadata(issuer: string) {
  return {
    issuer,
    authorization_endpoint: issuer + OAUTH_PATHS.authorize,
    token_endpoint: issuer + OAUTH_PATHS.token,
    registration_endpoint: issuer + OAUTH_PATHS.register,
    revocation_endpoint: issuer + OAUTH_PATHS.revoke,
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token'],
    code_challenge_methods_supported: ['S256'],
    token_endpoint_auth_methods_supported: ['none', 'client_secret_post', 'client_secret_basic'],
    revocation_endpoint_auth_methods_supported: ['none', 'client_secret_post', 'client_secret_basic'],
    scopes_supported: scopesSupported(),
    authorization_response_iss_parameter_supported: true,
    client_id_metadata_document_supported: true,
  };
}

export { redirectUriProblem };

function escHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/**
 * An authorization error answered in the browser instead of a redirect to the client: a plain page
 * under a CSP that allows nothing (no script, no style, no form, no framing).
 */
function errorPage(reply: FastifyReply, status: number, error: string, description: string, why: string): FastifyReply {
  const html = `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>Authorization request refused · Atelier</title></head><body><main><h1>Authorization request refused</h1><p><code>${escHtml(error)}</code>: ${escHtml(description)}</p><p>${escHtml(why)}</p><p>Return to your MCP client and start the connection again.</p></main></body></html>`;
  return reply
    .code(status)
    .header('content-type', 'text/html; charset=utf-8')
    .header('cache-control', 'no-store')
    .header('content-security-policy', "default-src 'none'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")
    .header('x-frame-options', 'DENY')
    .header('referrer-policy', 'no-referrer')
    .send(html);
}

const RegistrationSchema = z
  .object({
    redirect_uris: z.array(z.string().max(2000)).min(1).max(10),
    client_name: z.string().trim().min(1).max(100).optional(),
    client_uri: z.string().max(2000).optional(),
    logo_uri: z.string().max(2000).optional(),
    software_id: z.string().max(200).optional(),
    software_version: z.string().max(100).optional(),
    scope: z.string().max(2000).optional(),
    grant_types: z.array(z.string().max(100)).max(10).optional(),
    response_types: z.array(z.string().max(100)).max(10).optional(),
    token_endpoint_auth_method: z.string().max(100).optional(),
  })
  .passthrough();

function oauthError(reply: FastifyReply, e: unknown): FastifyReply {
  if (e instanceof OAuthFailure) {
    if (e.status === 401) reply.header('www-authenticate', 'Basic realm="atelier-oauth"');
    return reply.code(e.status).header('cache-control', 'no-store').send({ error: e.error, error_description: e.description });
  }
  if (e instanceof ServiceError) return reply.code(400).header('cache-control', 'no-store').send({ error: e.details.field === 'scope' ? 'invalid_scope' : 'invalid_request', error_description: e.message });
  throw e;
}

function clientCredentials(req: FastifyRequest, body: Record<string, string>): { id?: string; secret?: string } {
  const basic = /^Basic\s+(\S+)$/i.exec(req.headers.authorization ?? '');
  if (basic) {
    const decoded = Buffer.from(basic[1]!, 'base64').toString('utf8');
    const i = decoded.indexOf(':');
    if (i < 0) throw new OAuthFailure('invalid_client', 'malformed Basic credentials', 401);
    return { id: decodeURIComponent(decoded.slice(0, i)), secret: decodeURIComponent(decoded.slice(i + 1)) };
  }
  return { id: body.client_id, secret: body.client_secret };
}

function formBody(req: FastifyRequest): Record<string, string> {
  const b = req.body;
  if (!(req.headers['content-type'] ?? '').toLowerCase().startsWith('application/x-www-form-urlencoded') || !b || typeof b !== 'object') throw new OAuthFailure('invalid_request', 'send the parameters as application/x-www-form-urlencoded');
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(b as Record<string, unknown>)) if (typeof v === 'string') out[k] = v;
  return out;
}

function cors(reply: FastifyReply): FastifyReply {
  return reply
    .header('access-control-allow-origin', '*')
    .header('access-control-allow-methods', 'GET, POST, OPTIONS')
    .header('access-control-allow-headers', 'authorization, content-type, mcp-protocol-version')
    .header('access-control-max-age', '600');
}

/** The metadata-document clients of this instance: fetches under the instance's settings. */
function cimdClients(app: App, store: OAuthStore): CimdClients {
  let extraCa: string | undefined;
  if (app.config.oauthCimdCaFile) {
    try {
      extraCa = readFileSync(app.config.oauthCimdCaFile, 'utf8');
    } catch (e) {
      throw new ConfigError(`invalid setting --oauth-cimd-ca-file / ATELIER_OAUTH_CIMD_CA_FILE: ${app.config.oauthCimdCaFile} cannot be read (${(e as NodeJS.ErrnoException).code})`, 'oauthCimdCaFile');
    }
    if (!extraCa.includes('-----BEGIN CERTIFICATE-----')) throw new ConfigError(`invalid setting --oauth-cimd-ca-file / ATELIER_OAUTH_CIMD_CA_FILE: ${app.config.oauthCimdCaFile} holds no PEM certificate`, 'oauthCimdCaFile');
  }
  if (app.config.oauthCimdAllowLoopback) app.log.warn('--oauth-cimd-allow-loopback: OAuth client metadata documents may be fetched from loopback addresses (development and tests only)');
  return new CimdClients(store, new CimdFetcher({ allowLoopback: app.config.oauthCimdAllowLoopback, extraCa, dnsServers: app.config.oauthCimdDnsServers }), new CimdAddressLimit(app.config.oauthCimdFetchesPerMinute));
}

export function registerOAuthRoutes(f: FastifyInstance, app: App, store: OAuthStore): void {
  const cimd = cimdClients(app, store);
  f.register(async (scope) => {
    scope.addHook('onRequest', async (req, reply) => {
      const path = (req.url ?? '/').split('?')[0]!;
      if (OAUTH_CORS_PATHS.has(path)) cors(reply);
    });
    scope.setErrorHandler((err, _req, reply) => {
      const e = err as { statusCode?: number; message?: string };
      if (err instanceof ServiceError || (e.statusCode && e.statusCode < 500))
        return reply.code(400).header('cache-control', 'no-store').send({ error: 'invalid_request', error_description: e.message ?? 'bad request' });
      app.log.error({ err }, 'oauth endpoint failure');
      return reply.code(500).send({ error: 'server_error', error_description: 'internal error' });
    });
    for (const p of OAUTH_CORS_PATHS) scope.options(p, async (_req, reply) => cors(reply).code(204).send());

    const prm = async (req: FastifyRequest, reply: FastifyReply) => {
      const issuer = issuerOf(app, req.headers.host);
      const doc = buildOAuthProtectedResourceMetadata({
        oauthMetadata: authorizationServerMetadata(issuer) as never,
        resourceServerUrl: new URL(resourceOf(issuer)),
        scopesSupported: scopesSupported(),
        resourceName: 'Atelier',
        dangerouslyAllowInsecureIssuerUrl: issuer.startsWith('http://'),
      });
      return reply.header('cache-control', 'max-age=300').send({ ...doc, bearer_methods_supported: ['header'] });
    };
    scope.get('/.well-known/oauth-protected-resource', prm);
    scope.get('/.well-known/oauth-protected-resource/mcp', prm);
    scope.get('/.well-known/oauth-authorization-server', async (req, reply) => reply.header('cache-control', 'max-age=300').send(authorizationServerMetadata(issuerOf(app, req.headers.host))));

    scope.post(OAUTH_PATHS.register, async (req, reply) => {
      const parsed = RegistrationSchema.safeParse(req.body ?? {});
      const fail = (error: string, d: string) => reply.code(400).header('cache-control', 'no-store').send({ error, error_description: d });
      if (!parsed.success) {
        const i = parsed.error.issues[0]!;
        return fail('invalid_client_metadata', `${i.path.join('.') || 'body'}: ${i.message}`);
      }
      const m = parsed.data;
      for (const u of m.redirect_uris) {
        const p = redirectUriProblem(u);
        if (p) return fail('invalid_redirect_uri', `redirect_uris: ${JSON.stringify(u.slice(0, 200))} ${p}`);
      }
      const method = m.token_endpoint_auth_method ?? 'none';
      if (!['none', 'client_secret_post', 'client_secret_basic'].includes(method)) return fail('invalid_client_metadata', `token_endpoint_auth_method: ${method} is not supported (none, client_secret_post, client_secret_basic)`);
      const grants = m.grant_types ?? ['authorization_code', 'refresh_token'];
      if (grants.some((g) => g !== 'authorization_code' && g !== 'refresh_token')) return fail('invalid_client_metadata', 'grant_types: only authorization_code and refresh_token');
      if ((m.response_types ?? ['code']).some((r) => r !== 'code')) return fail('invalid_client_metadata', 'response_types: only code');
      if (m.scope !== undefined) {
        try {
          accessFromScope(m.scope);
        } catch (e) {
          return fail('invalid_client_metadata', (e as Error).message);
        }
      }
      if (!store.registrationRoom())
        return reply.code(429).header('retry-after', '3600').header('cache-control', 'no-store').send({ error: 'temporarily_unavailable', error_description: 'too many clients registered and not yet approved; try again later' });
      const name = cleanClientName(m.client_name ?? '');
      const metadata = {
        client_name: name,
        redirect_uris: m.redirect_uris,
        grant_types: grants,
        response_types: ['code'],
        token_endpoint_auth_method: method,
        ...(m.client_uri ? { client_uri: m.client_uri } : {}),
        ...(m.software_id ? { software_id: m.software_id } : {}),
        ...(m.software_version ? { software_version: m.software_version } : {}),
        ...(m.scope ? { scope: m.scope } : {}),
      };
      const { client, secret } = store.registerClient(name, m.redirect_uris, metadata, method !== 'none');
      app.audit.record({ actor: 'system', action: 'oauth_client_register', target: client.id, outcome: 'ok', details: { name } });
      return reply
        .code(201)
        .header('cache-control', 'no-store')
        .send({ ...metadata, client_id: client.id, client_id_issued_at: Math.floor(Date.parse(client.createdAt) / 1000), ...(secret ? { client_secret: secret, client_secret_expires_at: 0 } : {}) });
    });

    scope.get(OAUTH_PATHS.authorize, async (req, reply) => {
      const q = req.query as Record<string, unknown>;
      const str = (k: string) => (typeof q[k] === 'string' ? (q[k] as string) : undefined);
      const issuer = issuerOf(app, req.headers.host);
      reply.header('cache-control', 'no-store').header('referrer-policy', 'no-referrer');
      const clientId = str('client_id');
      const redirectUri = str('redirect_uri');
      let client: ClientRecord | null = null;
      if (clientId && isMetadataUrlClientId(clientId)) {
        // A Client ID Metadata Document URL: the client is what the document at it says (fetched
        // now unless a fresh copy is kept). Any failure is a page: there is no client to send it to.
        try {
          const r = await cimd.resolve(clientId, clientAddress(req.raw, app.config.trustedProxies));
          client = r.client;
          if (r.change !== 'same')
            app.audit.record({ actor: 'system', action: 'oauth_client_metadata', target: client.id, outcome: 'ok', details: { url: clientId, name: client.name, change: r.change } });
        } catch (e) {
          if (!(e instanceof CimdFailure)) throw e;
          app.log.info({ clientId: clientId.slice(0, 300), reason: e.message }, 'oauth: client metadata document refused');
          if (e.retryAfterSeconds !== undefined) reply.header('retry-after', String(e.retryAfterSeconds));
          return errorPage(
            reply,
            e.retryAfterSeconds !== undefined ? 429 : e.error === 'temporarily_unavailable' ? 503 : 400,
            e.error,
            // Parts of the message come from the document's host: no format or control characters.
            `client_id ${clientId.slice(0, 300)}: ${e.message.replace(/[\p{Cf}\p{Cc}]/gu, '')}`,
            'This client identifies itself by the URL of its metadata document; Atelier could not use that document, so there is no client to send this error to.',
          );
        }
      } else if (clientId) client = store.client(clientId);
      // RFC 6749 section 4.1.2.1: without a known client and an exactly registered redirect URI
      // there is nowhere safe to send an error. Beyond it (RFC 9700 section 4.11.2), registration is
      // open, so a registered URI proves nothing: errors go back to the client only on a redirect URI
      // the owner already approved a request for (a live grant of this client issued a code to it);
      // otherwise they are a page here, and this origin is no open redirector.
      if (!client || client.revokedAt)
        return errorPage(reply, 400, 'invalid_request', 'unknown or revoked client_id', 'Register the client with POST /oauth/register first, or use the https URL of its Client ID Metadata Document as client_id.');
      const redirect = redirectUri;
      if (!redirect || !client.redirectUris.includes(redirect))
        return errorPage(reply, 400, 'invalid_request', `redirect_uri is missing or does not exactly match a redirect URI ${client.metadataUrl ? "listed in the client's metadata document" : 'registered for this client'}`, 'The error is not sent to an unregistered redirect URI.');
      const state = str('state');
      const trusted = store.approvedRedirect(client.id, redirect);
      const back = (error: string, description: string) => {
        if (!trusted)
          return errorPage(reply, 400, error, description, 'The owner has not approved this client for this redirect URI yet, so the error is shown here rather than sent to it.');
        const u = new URL(redirect);
        u.searchParams.set('error', error);
        u.searchParams.set('error_description', description);
        if (state !== undefined) u.searchParams.set('state', state);
        u.searchParams.set('iss', issuer);
        return reply.redirect(u.toString(), 302);
      };
      if (str('response_type') !== 'code') return back('unsupported_response_type', 'response_type must be code');
      const challenge = str('code_challenge');
      const method = str('code_challenge_method');
      if (!challenge) return back('invalid_request', 'code_challenge is required (PKCE with S256)');
      if (method !== 'S256') return back('invalid_request', 'code_challenge_method must be S256 (plain is not accepted)');
      if (!/^[A-Za-z0-9_-]{43}$/.test(challenge)) return back('invalid_request', 'code_challenge must be the base64url SHA-256 of the verifier (43 characters)');
      const resource = str('resource') ?? resourceOf(issuer);
      if (resource.replace(/\/$/, '') !== resourceOf(issuer)) return back('invalid_target', `resource must be ${resourceOf(issuer)}`);
      let scopeStr: string;
      try {
        scopeStr = scopeFromAccess(accessFromScope(str('scope')));
      } catch (e) {
        return back('invalid_scope', (e as Error).message);
      }
      if (state !== undefined && state.length > 1000) return back('invalid_request', 'state too long');
      const pending = store.savePending({ clientId: client.id, redirectUri: redirect, codeChallenge: challenge, state, scope: scopeStr, resource: resourceOf(issuer) });
      if (!pending) return back('temporarily_unavailable', 'too many authorization requests waiting for the owner; try again later');
      return reply.redirect(`${OAUTH_PATHS.consent}?request=${encodeURIComponent(pending)}`, 303);
    });

    scope.post(OAUTH_PATHS.token, async (req, reply) => {
      try {
        const body = formBody(req);
        const creds = clientCredentials(req, body);
        const client = store.authenticateClient(creds.id, creds.secret);
        const issuer = issuerOf(app, req.headers.host);
        let tokens;
        if (body.grant_type === 'authorization_code') {
          if (!body.code) throw new OAuthFailure('invalid_request', 'code is required');
          tokens = store.exchangeCode(client, body.code, body.code_verifier, body.redirect_uri, body.resource?.replace(/\/$/, ''), resourceOf(issuer));
        } else if (body.grant_type === 'refresh_token') {
          if (!body.refresh_token) throw new OAuthFailure('invalid_request', 'refresh_token is required');
          tokens = store.refresh(client, body.refresh_token, body.scope, body.resource?.replace(/\/$/, ''));
        } else {
          throw new OAuthFailure('unsupported_grant_type', 'grant_type must be authorization_code or refresh_token');
        }
        return reply.header('cache-control', 'no-store').header('pragma', 'no-cache').send(tokens);
      } catch (e) {
        if (e instanceof OAuthFailure) app.audit.record({ actor: 'system', action: 'oauth_token', outcome: 'refused', reason: `${e.error}: ${e.description}` });
        return oauthError(reply, e);
      }
    });

    scope.post(OAUTH_PATHS.revoke, async (req, reply) => {
      try {
        const body = formBody(req);
        const creds = clientCredentials(req, body);
        const client = store.authenticateClient(creds.id, creds.secret);
        if (!body.token) throw new OAuthFailure('invalid_request', 'token is required');
        store.revokeToken(client, body.token);
        return reply.header('cache-control', 'no-store').code(200).send({});
      } catch (e) {
        return oauthError(reply, e);
      }
    });
  });
}
