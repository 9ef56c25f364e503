/**
 * The MCP endpoint: Streamable HTTP through the v2 SDK's createMcpHandler, which serves
 * 2026-07-28 clients per request and 2025-era clients statelessly. No protocol session holds
 * state: workspaces, operations and tasks are named by explicit ids, so a restart strands nobody.
 * Every request needs an owner bearer token (401 with WWW-Authenticate otherwise).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { createMcpHandler } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';
import type { App } from '../app.js';
import { errorResult, type ToolRegistry } from './registry.js';
import { VERSION } from '../core/version.js';
import { ServiceError, errorEnvelope } from '../core/errors.js';
import { FULL_ACCESS, intersect, parseBooleanHeader, parseReadonlyHeader, parseToolsets, type Access } from '../core/toolsets.js';
import { issuerOf, resourceMetadataUrl, resourceOf } from './oauth/routes.js';
import type { OAuthStore } from '../services/access/index.js';
import { McpLogLevels, mcpLogger, type McpNotifyContext } from './logging.js';
import { directPath, type NodeResponseTransport, type PlainCallContext } from './node-transport.js';
import type { TokenVerifyCache } from '../services/access/index.js';
import { loadWireNative } from './wire-native.js';
import type { WireText } from './wire-text.js';
import { LINKED_TOOLS, registerResourceSurfaces, resourceLinks } from './resources.js';
import { declaresUrlElicitation, isModern, McpTasks, registerTaskHandlers, requestCapabilities, TASK_CAPABILITIES, TaskServer, withTaskSupport, type TaskCaller } from './tasks.js';
import { InputRequired, inputRequiredResult, approvalWaitMs, legacyApprovals, modernApprovals, type InCallApprovals } from './in-call-approvals.js';
import { ClientRequests, LegacySessions } from './legacy-sessions.js';
import { DynamicToolsets, type DynamicCaller } from './dynamic-toolsets.js';

/**
 * The largest body /mcp reads, derived from the largest request the tool schemas allow (docs/files.md,
 * "Limits"): a files_write_batch at the daemon's 16 MiB batch bound whose every byte is a control
 * character, each escaped as \u00XX (6 bytes of JSON per byte: 96 MiB), plus 1000 entries' paths
 * of 1024 escaped characters (6 MiB) and fields, keys and the JSON-RPC envelope (under 2 MiB).
 * A files_write of 1048576 such characters is 6 MiB. Only an authenticated request is read.
 */
export const MCP_MAX_BODY_BYTES = 104 * 1024 * 1024;

/** A call still running after this long gets an SSE stream and a keep-alive comment this often (the SDK's own default). */
const SSE_KEEP_ALIVE_MS = 15_000;

/**
 * Sent once at initialize: the conventions every tool shares, so no tool's schema repeats them
 * (issue #45 item 1: the workspaceId, cursor and idempotencyKey sentences were on up to 100 tools).
 */
export const INSTRUCTIONS =
  'Atelier gives you isolated coding workspaces on approved HTTPS repositories. Start with workspace_open ' +
  '(or workspace_list and workspace_set_active), then workspace_context for orientation. Conventions of every tool: ' +
  'an omitted workspaceId means the active workspace; a cursor comes from the previous page (omit it for the first); ' +
  'an idempotencyKey is any unique string you choose: for 24 hours the same key with the same input replays the first result, with other input it is a CONFLICT; ' +
  'expectedSha256 / expectedGeneration refuse the change (CONFLICT) when the current value differs. ' +
  'Errors come back with structuredContent.error = {code, message, retryable, details}; details.field names the argument at fault.';

/** Added to INSTRUCTIONS for a connection that asked for the dynamic mode (src/mcp/dynamic-toolsets.ts). */
export const DYNAMIC_INSTRUCTIONS =
  ' Dynamic toolsets: the tool list starts with the core tools of workspace, files, commands and git; toolsets_enable adds a toolset (or the rest of a core one) and the list change follows ' +
  '(with a session on 2025-11-25; on a subscriptions/listen stream with toolsListChanged on 2026-07-28). A client list changes cannot reach gets the full list instead; toolsets_list says which.';

export interface McpStats {
  calls: Map<string, number>;
}

/** What the auth gate hands to the MCP handlers on AuthInfo.extra. */
interface CallerExtra {
  access: Access;
  logKey: string;
  /** The dashboard's origin for this request (the issuer): approval pages are under it. */
  origin: string;
  /** Asked for the dynamic mode: X-MCP-Dynamic-Toolsets, else the token's --dynamic-toolsets. */
  dynamic: boolean;
  /** The request's Mcp-Session-Id (2025-era), if any. */
  session?: string;
}

type Caller = TaskCaller & { origin: string } & DynamicCaller;

function callerOf(authInfo: { clientId?: string; extra?: Record<string, unknown> } | undefined): Caller {
  const extra = authInfo?.extra as CallerExtra | undefined;
  return {
    principal: authInfo?.clientId ?? 'unknown',
    access: extra?.access ?? FULL_ACCESS,
    logKey: extra?.logKey ?? 'unknown',
    origin: extra?.origin ?? '',
    dynamic: extra?.dynamic === true,
    session: extra?.session,
  };
}

export function createMcpEndpoint(app: App, registry: ToolRegistry, stats: McpStats, oauth?: OAuthStore) {
  // Large results' native escaping (src/mcp/wire-native.ts): the installed addon now, else one built
  // in the background; JavaScript meanwhile and whenever it cannot be had.
  void loadWireNative(join(app.dataDir, 'run'), (why) => app.log.info({ why }, 'large results escaped in JavaScript (the wire-text addon is not available)'));
  const logLevels = new McpLogLevels();
  // The dynamic mode's state per connection and its list changes (src/mcp/dynamic-toolsets.ts).
  const dynamic = new DynamicToolsets(registry);
  /**
   * tools/call, from the per-request Server's handler or straight from the direct path (plain calls,
   * src/mcp/node-transport.ts): the registry's pipeline with the caller, progress and log messages.
   * Its results always carry object structuredContent beside a text block, which the SDK's projection
   * (projectCallToolResult) returns unchanged, so both routes answer the same.
   */
  const callTool = async (
    params: { name: string; arguments?: Record<string, unknown>; _meta?: { progressToken?: string | number } },
    c: {
      caller: Caller;
      signal: AbortSignal;
      mcp: McpNotifyContext;
      deferText?: (text: WireText) => string;
      approvals?: InCallApprovals;
      output?: (chunk: Buffer) => void;
      status?: (message: string) => void;
      /** A 2026-07-28 request (the dynamic mode keys and notifies by era). */
      modern?: boolean;
    },
  ) => {
    const caller = c.caller;
    const principal = caller.principal;
    const progressToken = params._meta?.progressToken;
    const log = mcpLogger(c.mcp, logLevels.get(caller.logKey), params.name);
    // Progress messages also go out as log messages, once per distinct message (not per tick).
    let lastLogged = '';
    const logStep = (message: string | undefined) => {
      if (message && message !== lastLogged && !/^waiting for operation /.test(message)) {
        lastLogged = message;
        log('info', message);
      }
      if (message) c.status?.(message);
    };
    // files_list, grep_search and symbols_search results also carry resource_link items (src/mcp/resources.ts).
    let links: Array<Record<string, unknown>> = [];
    const result = await registry.call(app, params.name, params.arguments, {
      principal,
      actor: 'mcp',
      signal: c.signal,
      access: caller.access,
      log,
      deferText: c.deferText,
      onResult: LINKED_TOOLS.has(params.name) ? (tool, ws, structured) => (links = resourceLinks(tool, ws, structured)) : undefined,
      approvals: c.approvals,
      output: c.output,
      meta: params._meta as Record<string, unknown> | undefined,
      toolsets: dynamic.session(caller, !!c.modern, c.modern ? undefined : (n) => c.mcp.mcpReq.notify(n as never)),
      progress:
        progressToken === undefined
          ? (_p, _t, message) => logStep(message)
          : (progress, total, message) => {
              void c.mcp.mcpReq.notify({ method: 'notifications/progress', params: { progressToken, progress, total, message } }).catch(() => undefined);
              logStep(message);
            },
    });
    const key = `${params.name}|${result.isError ? (result.structuredContent?.error as { code: string }).code : 'ok'}`;
    stats.calls.set(key, (stats.calls.get(key) ?? 0) + 1);
    if (links.length && !result.isError) result.content = [...result.content, ...(links as never[])];
    return result;
  };

  // Long calls as tasks (src/mcp/tasks.ts): run through callTool, with no notifications (a task has none).
  const silent: McpNotifyContext = { mcpReq: { notify: async () => undefined } };
  const tasks = new McpTasks(app, registry, (params, c) => callTool(params, { caller: { ...c.caller, origin: '', dynamic: false }, signal: c.signal, mcp: silent, output: c.output, status: c.status, approvals: c.approvals }));

  // Requests to 2025-era clients in the middle of a call, and the sessions that say which can take them (legacy-sessions.ts).
  const sessions = new LegacySessions();
  const clientRequests = new ClientRequests();

  // `direct`: the direct path's transport, which writes a large result's text from its pieces.
  // `client`: what a 2025-era request's session says of its client (node-transport.ts).
  // `authInfo`: the request's caller, whose dynamic mode decides whether list changes are advertised.
  const factory = (direct?: NodeResponseTransport, client?: Pick<PlainCallContext, 'clientCapabilities' | 'request' | 'authInfo'>) => {
    const legacyElicits = !!client?.request && declaresUrlElicitation(client.clientCapabilities);
    const asked = client?.authInfo ? callerOf(client.authInfo).dynamic : false;
    const server = new TaskServer(
      { name: 'atelier', version: VERSION },
      {
        // listChanged only where it is honoured: a connection that asked for the dynamic mode.
        capabilities: { tools: { listChanged: asked }, logging: {}, ...TASK_CAPABILITIES },
        instructions: asked ? INSTRUCTIONS + DYNAMIC_INSTRUCTIONS : INSTRUCTIONS,
      },
    );
    // Stateless HTTP: each request gets a new Server, so the level lives per caller (token or OAuth
    // client, and Mcp-Session-Id when the client sends one), not in the Server instance.
    server.setRequestHandler('logging/setLevel', (req, ctx) => {
      logLevels.set(callerOf(ctx.http?.authInfo).logKey, req.params.level);
      return {};
    });
    server.setRequestHandler('tools/list', (_req, ctx) => ({ tools: withTaskSupport(dynamic.list(callerOf(ctx.http?.authInfo), isModern(ctx))) }));
    // Resources (workspace files, skill files), prompts (skills) and the skills extension: src/mcp/resources.ts.
    registerResourceSurfaces(server, { app, registry, caller: (ctx) => callerOf(ctx.http?.authInfo) });
    server.setRequestHandler('tools/call', async (req, ctx) => {
      const caller = callerOf(ctx.http?.authInfo);
      const params = req.params as typeof req.params & { task?: unknown };
      const era = tasks.wanted(params, ctx, caller);
      if (era) {
        const elicits = era === 'modern' ? declaresUrlElicitation(requestCapabilities(ctx)) : legacyElicits;
        const approvals = elicits ? tasks.approvalsFor(caller.origin) : undefined;
        try {
          return (await tasks.start({ name: params.name, arguments: params.arguments }, caller, era, approvals)) as never;
        } catch (e) {
          // A key already used with other input: the call's own answer (CONFLICT), as a result instead of a task.
          if (e instanceof ServiceError) return errorResult(errorEnvelope(e).body.error) as never;
          throw e;
        }
      }
      const approvals = isModern(ctx) && declaresUrlElicitation(requestCapabilities(ctx)) ? modernApprovals(app.cursors, caller, params.name, ctx) : undefined;
      try {
        return server.projectCallToolResult(
          await callTool(params, { caller, signal: ctx.mcpReq.signal, mcp: ctx, deferText: direct ? (text) => direct.deferText(text) : undefined, approvals, modern: isModern(ctx) }),
          undefined,
        );
      } catch (e) {
        if (e instanceof InputRequired) return inputRequiredResult(app.cursors, e.ask, caller.principal, params.name) as never;
        throw e;
      }
    });
    registerTaskHandlers(server, tasks, (ctx) => callerOf(ctx.http?.authInfo), legacyElicits ? (method, params, signal) => client!.request!(method, params, signal, approvalWaitMs()) : undefined);
    return server;
  };

  const handler = createMcpHandler((c) => factory(undefined, { authInfo: c.authInfo }), {
    legacy: 'stateless',
    // List changes go to the listen streams of the connection they concern, never to all (dynamic-toolsets.ts).
    bus: dynamic.bus as never,
    maxRequestBodySize: MCP_MAX_BODY_BYTES, // the SDK's own default is 4 MiB
    onerror: (err) => app.log.debug({ err: err.message }, 'mcp request rejected'),
  });
  const node = toNodeHandler(handler, {
    maxRequestBodySize: MCP_MAX_BODY_BYTES,
    onerror: (err) => app.log.error({ err }, 'mcp adapter failure'),
  });

  // The 2025-era POST of one request is served directly on node:http (src/mcp/node-transport.ts);
  // everything else goes through the SDK's handler.
  const serve = directPath({
    factory,
    sdk: node as never,
    // A request the SDK serves runs where a listen stream it opens is filed under its caller.
    aroundSdk: (req, text, serve) => dynamic.forward(req, text, serve),
    maxBodyBytes: MCP_MAX_BODY_BYTES,
    keepAliveMs: SSE_KEEP_ALIVE_MS,
    sessions,
    clientRequests,
    toolCall: (params, c) => {
      const caller = callerOf(c.authInfo);
      const approvals = c.request && declaresUrlElicitation(c.clientCapabilities) ? legacyApprovals(caller.origin, c.request, c.notify) : undefined;
      return callTool(params, { caller, signal: c.signal, mcp: { mcpReq: { notify: c.notify } }, deferText: (text) => c.transport.deferText(text), approvals });
    },
  });

  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const caller = authenticate(app, oauth, req, res, app.tokenCache);
    if (!caller) return;
    (req as IncomingMessage & { auth?: unknown }).auth = caller;
    await serve(req, res);
  };
}

type Verifiers = ReturnType<typeof verifiers>;

/** Token checks, through the cache of verified tokens when there is one (src/services/access/token-cache.ts). */
function verifiers(app: App, oauth: OAuthStore | undefined, tokens: TokenVerifyCache | undefined) {
  return {
    bearer: (t: string) => (tokens ? tokens.verify('bearer', t, () => app.auth.verifyBearerAccess(t)) : app.auth.verifyBearerAccess(t)),
    oauth: (t: string) => {
      if (!oauth) return null;
      return tokens ? tokens.verify('oauth', t, () => oauth.verifyAccess(t), (v) => v.expiresAt * 1000) : oauth.verifyAccess(t);
    },
  };
}

/**
 * A token in the `access_token` query parameter (RFC 6750 section 2.3), for clients that can send
 * no header (the conformance suite 0.1.13): accepted only for tokens created with --read-only
 * --allow-in-url, never for full tokens or OAuth tokens (URLs end up in logs and histories).
 */
function queryToken(app: App, req: IncomingMessage, verify: Verifiers): { principal: string; access: Access } | 'refused' | null {
  const q = (req.url ?? '').indexOf('?');
  if (q < 0) return null;
  const t = new URLSearchParams((req.url ?? '').slice(q + 1)).get('access_token');
  if (!t) return null;
  const v = verify.bearer(t);
  if (!v || !v.access.allowInUrl || !v.access.readOnly) return 'refused';
  return { principal: v.principal, access: { toolsets: v.access.toolsets, readOnly: true } };
}

/** How long, and how many bytes of, an unwanted request body are discarded before the connection is cut. */
const DISCARD_MS = 500;
const DISCARD_BYTES = 2 * MCP_MAX_BODY_BYTES;

/**
 * After an early answer to a request whose body is not wanted: the body is read and dropped (never
 * kept), then the connection closes. Closing at once would make the kernel reset it while the client
 * is still sending, and a client then reports the reset (EPIPE) instead of the answer. A body that
 * trickles or never ends is cut after DISCARD_MS or DISCARD_BYTES, so it holds nothing for long.
 */
function discardThenClose(req: IncomingMessage): void {
  const socket = req.socket;
  // After a `Connection: close` answer node ends and then destroys the socket; only the end (our FIN)
  // happens now, and the destroy waits for the body's end or the bounds below.
  socket.destroySoon = () => socket.end();
  let seen = 0;
  const cut = (): void => {
    clearTimeout(timer);
    socket.destroy();
  };
  const timer = setTimeout(cut, DISCARD_MS);
  timer.unref();
  req.on('data', (chunk: Buffer) => {
    seen += chunk.length;
    if (seen > DISCARD_BYTES) cut();
  });
  req.once('end', cut);
  req.once('error', () => clearTimeout(timer));
}

/**
 * The auth gate of /mcp: an owner bearer token (atl_…) or an OAuth access token (atla_…) bound to
 * this resource; then the connection's own narrowing (X-MCP-Toolsets, X-MCP-Readonly), which can
 * only narrow what the token grants. Answers 401 with WWW-Authenticate naming the protected
 * resource metadata (RFC 9728), or 400 for a bad narrowing header; returns the AuthInfo otherwise.
 */
export function authenticate(app: App, oauth: OAuthStore | undefined, req: IncomingMessage, res: ServerResponse, tokens?: TokenVerifyCache): Record<string, unknown> | null {
  const verify = verifiers(app, oauth, tokens);
  const header = req.headers.authorization ?? '';
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
  const issuer = issuerOf(app, req.headers.host);
  let principal: string | null = null;
  let access: Access = FULL_ACCESS;
  let tokenDynamic = false;
  let why = 'unknown or revoked token';
  if (!header) {
    const inUrl = queryToken(app, req, verify);
    if (inUrl === 'refused') why = 'this token may not be sent in a URL (only tokens made with --read-only --allow-in-url)';
    else if (inUrl) {
      principal = inUrl.principal;
      access = inUrl.access;
    }
  }
  if (m) {
    const bearer = verify.bearer(m[1]!);
    if (bearer) {
      principal = bearer.principal;
      access = bearer.access;
      tokenDynamic = bearer.access.dynamicToolsets === true;
    } else if (oauth) {
      const v = verify.oauth(m[1]!);
      if (v && v.resource === resourceOf(issuer)) {
        principal = v.principal;
        access = v.access;
      } else if (v) why = 'the access token was issued for another resource';
      else if (m[1]!.startsWith('atla_')) why = 'the access token is unknown, expired or revoked';
    }
  }
  if (!principal) {
    const meta = `resource_metadata="${resourceMetadataUrl(issuer)}"`;
    const challenge = m || why !== 'unknown or revoked token' ? `Bearer realm="atelier", error="invalid_token", error_description="${why}", ${meta}` : `Bearer realm="atelier", ${meta}`;
    // No body of an unauthenticated request is kept: answer at once, then discard and close (below).
    res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': challenge, connection: 'close' });
    const message = m
      ? `the bearer token is not accepted (${why}); create one with \`atelier token create\`, or connect again through OAuth`
      : 'an owner bearer token is required: send "Authorization: Bearer <token>" (create one with `atelier token create`), or connect through OAuth (see docs/access.md)';
    res.end(JSON.stringify(errorEnvelope(new ServiceError('UNAUTHENTICATED', message)).body));
    discardThenClose(req);
    return null;
  }
  let dynamic = tokenDynamic;
  try {
    const conn: Access = {
      toolsets: parseToolsets(req.headers['x-mcp-toolsets'] as string | undefined, 'X-MCP-Toolsets'),
      readOnly: parseReadonlyHeader(req.headers['x-mcp-readonly']),
    };
    access = intersect(access, conn);
    dynamic = parseBooleanHeader(req.headers['x-mcp-dynamic-toolsets'], 'X-MCP-Dynamic-Toolsets') ?? dynamic;
  } catch (e) {
    const { status, body } = errorEnvelope(e);
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
    return null;
  }
  const session = typeof req.headers['mcp-session-id'] === 'string' ? req.headers['mcp-session-id'].slice(0, 200) : undefined;
  const extra: CallerExtra = { access, logKey: `${principal}|${session ?? ''}`, origin: issuer, dynamic, ...(session ? { session } : {}) };
  return { token: '[redacted]', clientId: principal, scopes: ['owner'], extra };
}
