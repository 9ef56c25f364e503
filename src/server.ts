/**
 * The runner's HTTP front: one node:http server. /mcp goes straight to the MCP endpoint (no
 * framework in the hot path); everything else (dashboard pages, /api/v1, /healthz, /metrics) is
 * served by fastify. Host and Origin are checked on every request against DNS rebinding: the
 * loopback names when bound to loopback, the configured public origin otherwise.
 */
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import type { App } from './app.js';
import { isLoopback } from './core/config.js';
import { clientAddress } from './core/client-address.js';
import { createMcpEndpoint, type McpStats } from './mcp/http.js';
import type { ToolRegistry } from './mcp/registry.js';
import { registerDashboard, type ApiRegistrar } from './dashboard/routes.js';
import { pendingSpecPaths } from './dashboard/spec-paths.js';
import { registerAppMetrics, type AppMetricSources } from './telemetry/app-metrics.js';
import { SANDBOX_KINDS, sandboxKind } from './sandbox/executor.js';
import { AGENT_STATUSES } from './services/agents/index.js';
import type { WorkspaceState } from './services/workspaces/index.js';
import { renderMetrics } from './telemetry/metrics.js';
import { withExtracted } from './telemetry/tracing.js';
import { ServiceError, errorEnvelope } from './core/errors.js';
import { OAUTH_CORS_PATHS, registerOAuthRoutes } from './mcp/oauth/routes.js';
import { oauthClientRoutes, registerConsent } from './dashboard/oauth.js';
import { PreviewGate, isPreviewPath } from './services/previews/index.js';

export interface RunningServer {
  url: string;
  port: number;
  registry: ToolRegistry;
  close(): Promise<void>;
}

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];

function hostnameOf(hostHeader: string): string | null {
  try {
    return new URL(`http://${hostHeader}`).hostname.toLowerCase();
  } catch {
    return null;
  }
}

/** Builds the Host/Origin guard for this instance's binding. */
export function originGuard(app: App): (req: IncomingMessage) => string | null {
  const loopback = isLoopback(app.config.host);
  const allowedHosts = loopback ? LOOPBACK_NAMES : [new URL(app.config.publicOrigin).hostname.toLowerCase()];
  const allowedOrigin = (o: string) => {
    try {
      const u = new URL(o);
      if (loopback) return LOOPBACK_NAMES.includes(u.hostname.toLowerCase()) && (u.protocol === 'http:' || u.protocol === 'https:');
      return u.origin === new URL(app.config.publicOrigin).origin;
    } catch {
      return false;
    }
  };
  return (req) => {
    const host = hostnameOf(req.headers.host ?? '');
    if (!host || !allowedHosts.includes(host)) return `Host header ${JSON.stringify(req.headers.host ?? '')} is not allowed`;
    const origin = req.headers.origin;
    if (origin !== undefined && origin !== 'null' && !allowedOrigin(origin)) return `Origin ${JSON.stringify(origin)} is not allowed`;
    if (origin === 'null') return 'Origin null is not allowed';
    return null;
  };
}

/**
 * OAuth (issue #16): a guard that lets browser-based clients (the MCP Inspector) call the
 * cookie-less OAuth endpoints cross-origin; Host is still checked.
 */
function oauthGuard(guard: (req: IncomingMessage) => string | null) {
  return (req: IncomingMessage): string | null => {
    const path = (req.url ?? '/').split('?')[0]!;
    if (OAUTH_CORS_PATHS.has(path)) {
      const { origin: _origin, ...rest } = req.headers;
      return guard({ headers: rest } as IncomingMessage);
    }
    return guard(req);
  };
}

export async function startServer(app: App, opts: { apiRoutes?: ApiRegistrar[]; servedSpecPaths?: string[] } = {}): Promise<RunningServer> {
  const registry = app.registry;
  void registry.list; // compile every tool now, not on the first call
  const stats: McpStats = { calls: new Map() };
  const mcp = createMcpEndpoint(app, registry, stats, app.oauth);
  const guard = oauthGuard(originGuard(app));
  let inflight = 0;
  let idleResolve: (() => void) | null = null;
  registerAppMetrics(appMetricSources(app));

  const forbid = (res: ServerResponse, why: string) => {
    const { status, body } = errorEnvelope(new ServiceError('PERMISSION_DENIED', why));
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };

  // Bounds on clients that hold connections: the whole request (headers and body) must arrive within
  // httpRequestTimeoutMs, headers within httpHeadersTimeoutMs (then 408 and close); a connection that
  // has not shown a valid token or session idles at most httpHeadersTimeoutMs, and past
  // httpMaxUnauthenticatedConnections of those the oldest is closed (so they cannot crowd the owner out).
  const cfg = app.config;
  const unauthenticated = new Set<Socket>();
  const authenticated = (req: IncomingMessage): boolean => {
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    // Owner bearer tokens and OAuth access tokens alike (docs/access.md).
    if (bearer) return app.auth.verifyBearer(bearer[1]!) !== null || app.oauth.verifyAccess(bearer[1]!) !== null;
    const session = /(?:^|;\s*)atelier_session=([^;\s]+)/.exec(req.headers.cookie ?? '');
    return session ? app.auth.getSession(decodeURIComponent(session[1]!)) !== null : false;
  };

  // Preview links (/p/..., services/previews/http-gate.ts): checked by the gate; Host is checked here,
  // Origin not (a preview's sandboxed pages send Origin: null; they reach nothing but their link).
  const previews = new PreviewGate({
    previews: app.previews,
    handle: (id) => app.workspaces.activeHandle(id),
    relay: (h, port) => {
      if (!app.executor.relay) throw new ServiceError('NOT_SUPPORTED', 'this executor cannot relay to a workspace port');
      return app.executor.relay(h, port);
    },
    // A token (or OAuth grant) opens an owner link only if it may use previews: one narrowed to other toolsets may not.
    ownerBearer: (t) => {
      const access = app.auth.verifyBearerAccess(t)?.access ?? app.oauth.verifyAccess(t)?.access;
      return access !== undefined && (access.toolsets === null || access.toolsets.includes('previews'));
    },
    ownerSession: (id) => app.auth.getSession(id) !== null,
    // Forwarding headers toward the workspace name the client as the login limits see it (#42 item 11).
    clientAddress: (req) => clientAddress(req, cfg.trustedProxies),
    log: app.log,
  });
  const hostOnly = (req: IncomingMessage): string | null => {
    const { origin: _origin, ...rest } = req.headers;
    return guard({ headers: rest } as IncomingMessage);
  };
  const trust = (socket: Socket) => () => {
    unauthenticated.delete(socket);
    socket.setTimeout(0);
  };

  const limits = { requestTimeout: cfg.httpRequestTimeoutMs, headersTimeout: cfg.httpHeadersTimeoutMs, keepAliveTimeout: 65_000, connectionsCheckingInterval: Math.min(1000, cfg.httpHeadersTimeoutMs) };

  // fastify serves through this server (serverFactory) and this server hands fastify what is not
  // /mcp: a true cycle, broken by the handler reaching `fastify` (built next) only per request.
  const http: HttpServer = createServer(limits, (req, res) => {
    if (unauthenticated.has(req.socket) && authenticated(req)) {
      unauthenticated.delete(req.socket);
      req.socket.setTimeout(0);
    }
    if (isPreviewPath(req.url)) {
      const hostProblem = hostOnly(req);
      if (hostProblem) return forbid(res, hostProblem);
      inflight++;
      res.on('close', () => {
        inflight--;
        if (inflight === 0 && idleResolve) idleResolve();
      });
      void previews.request(req, res, trust(req.socket)).catch((err) => {
        app.log.error({ err }, 'preview request failure');
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
      return;
    }
    const problem = guard(req);
    if (problem) return forbid(res, problem);
    inflight++;
    res.on('close', () => {
      inflight--;
      if (inflight === 0 && idleResolve) idleResolve();
    });
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/mcp') {
      // Trace context of the request's traceparent header (a tools/call's _meta wins: src/mcp/registry.ts).
      withExtracted([req.headers], () => mcp(req, res)).catch((err) => {
        app.log.error({ err }, 'mcp endpoint failure');
        const { status, body } = errorEnvelope(err);
        if (!res.headersSent) res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      });
      return;
    }
    fastify.routing(req, res);
  });
  // Upgrades (WebSocket) are served only under preview links; anything else is closed.
  http.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    const hostProblem = isPreviewPath(req.url) ? hostOnly(req) : 'upgrades are served only under preview links (/p/...)';
    if (hostProblem) {
      const text = JSON.stringify(errorEnvelope(new ServiceError('PERMISSION_DENIED', hostProblem)).body);
      socket.end(`HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`);
      return;
    }
    void previews.upgrade(req, socket, head, trust(socket)).catch((err) => {
      app.log.error({ err }, 'preview upgrade failure');
      socket.destroy();
    });
  });
  http.on('connection', (socket: Socket) => {
    if (unauthenticated.size >= cfg.httpMaxUnauthenticatedConnections) unauthenticated.values().next().value?.destroy();
    unauthenticated.add(socket);
    socket.setTimeout(cfg.httpHeadersTimeoutMs, () => {
      if (unauthenticated.has(socket)) socket.destroy();
    });
    socket.once('close', () => unauthenticated.delete(socket));
  });

  const fastify: FastifyInstance = Fastify({
    serverFactory: () => http,
    logger: false,
    bodyLimit: 2 * 1024 * 1024,
    trustProxy: false,
  });
  // JSON bodies: an empty body is no body (a DELETE sent with a JSON content type), bad JSON is INVALID_ARGUMENT.
  fastify.removeContentTypeParser('application/json');
  fastify.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    if ((body as string).trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(body as string));
    } catch (e) {
      done(new ServiceError('INVALID_ARGUMENT', `request body: not valid JSON (${(e as Error).message})`, { field: 'body' }), undefined);
    }
  });
  fastify.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_req, body, done) => {
    done(null, Object.fromEntries(new URLSearchParams(body as string)));
  });
  registerDashboard(fastify, app, [...(opts.apiRoutes ?? []), oauthClientRoutes(app.oauth), pendingSpecPaths(new Set(opts.servedSpecPaths ?? []))]);
  registerOAuthRoutes(fastify, app, app.oauth);
  registerConsent(fastify, app, app.oauth);
  fastify.get('/metrics', async (req, reply) => {
    const m = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '');
    if (!m || !app.auth.verifyBearer(m[1]!)) {
      const { status, body } = errorEnvelope(new ServiceError('UNAUTHENTICATED', 'bearer token required'));
      return reply.code(status).header('www-authenticate', 'Bearer realm="atelier"').send(body);
    }
    // prom-client (src/telemetry/metrics.ts); names are stable (docs/operations.md "Metrics").
    const { contentType, text } = await renderMetrics();
    return reply.header('content-type', contentType).send(text);
  });
  await fastify.ready();

  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(app.config.port, app.config.host, () => resolve());
  });
  const port = (http.address() as AddressInfo).port;
  const hostForUrl = app.config.host.includes(':') ? `[${app.config.host}]` : app.config.host;
  const base = app.config.publicOrigin || `http://${hostForUrl}:${port}`;
  app.previews.origin = base;

  return {
    url: base,
    port,
    registry,
    async close() {
      // Stop accepting, let calls in flight finish (up to the grace period), then close idle sockets.
      http.close();
      http.closeIdleConnections();
      if (inflight > 0) {
        await Promise.race([
          new Promise<void>((r) => (idleResolve = r)),
          new Promise<void>((r) => setTimeout(r, app.config.shutdownGraceMs).unref()),
        ]);
      }
      http.closeAllConnections();
      await fastify.close().catch(() => undefined);
    },
  };
}

const WORKSPACE_STATES: readonly string[] = ['opening', 'active', 'expired_recoverable', 'closed'] satisfies WorkspaceState[];

/** What the application's gauges read (telemetry/app-metrics.ts), from the App. */
export function appMetricSources(app: App): AppMetricSources {
  const fileHandoffs = app.executor.fileHandoffs?.bind(app.executor);
  return {
    countBy: (table, column) => app.db.prepare(`SELECT ${column} AS s, COUNT(*) AS n FROM ${table} GROUP BY ${column}`).all() as Array<{ s: string; n: number }>,
    workspaceStates: WORKSPACE_STATES,
    agentStatuses: AGENT_STATUSES,
    sandboxKinds: SANDBOX_KINDS,
    sandboxes: () => app.workspaces.liveSandboxes().map((h) => ({ kind: sandboxKind(h), claim: h.placement?.claim?.launch })),
    sandboxStats: () => Promise.all(app.workspaces.liveSandboxes().map((h) => app.executor.stats(h).catch(() => null))),
    spendWindow: (window) => app.spend.window(window),
    spendCaps: () => app.spend.policies(),
    login: () => app.loginThrottle.metrics(),
    ...(fileHandoffs ? { fileHandoffs } : {}),
    checkpoints: () => app.checkpoints.metricValues(),
    codeIntel: () => app.codeIntel.metrics(),
    imagePool: app.imagePool,
    lastBackupAt: () => app.backups.summary().last?.finishedAt ?? null,
  };
}
