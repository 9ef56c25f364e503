/**
 * The MCP endpoint: Streamable HTTP through the v2 SDK's createMcpHandler, which serves
 * 2026-07-28 clients per request and 2025-era clients statelessly. No protocol session holds
 * state: workspaces, operations and tasks are named by explicit ids, so a restart strands nobody.
 * Every request needs an owner bearer token (401 with WWW-Authenticate otherwise).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createMcpHandler, Server } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';
import type { App } from '../app.js';
import type { ToolRegistry } from './registry.js';
import { VERSION } from '../core/version.js';

/**
 * The largest body /mcp reads, derived from the largest request the tool schemas allow (docs/files.md,
 * "Limits"): a files_write_batch at the daemon's 16 MiB batch bound whose every byte is a control
 * character, each escaped as \u00XX (6 bytes of JSON per byte: 96 MiB), plus 1000 entries' paths
 * of 1024 escaped characters (6 MiB) and fields, keys and the JSON-RPC envelope (under 2 MiB).
 * A files_write of 1048576 such characters is 6 MiB. Only an authenticated request is read.
 */
export const MCP_MAX_BODY_BYTES = 104 * 1024 * 1024;

const INSTRUCTIONS =
  'Atelier gives you isolated coding workspaces on approved HTTPS repositories. Start with workspace_open ' +
  '(or workspace_list and workspace_set_active), then workspace_context for orientation. Tools that take an ' +
  'optional workspaceId act on the active workspace when it is omitted. Errors come back with ' +
  'structuredContent.error = {code, message, retryable, details}; details.field names the argument at fault.';

export interface McpStats {
  calls: Map<string, number>;
}

export function createMcpEndpoint(app: App, registry: ToolRegistry, stats: McpStats) {
  const factory = () => {
    const server = new Server(
      { name: 'atelier', version: VERSION },
      { capabilities: { tools: { listChanged: false } }, instructions: INSTRUCTIONS },
    );
    server.setRequestHandler('tools/list', () => ({ tools: registry.list }));
    server.setRequestHandler('tools/call', async (req, ctx) => {
      const principal = ctx.http?.authInfo?.clientId ?? 'unknown';
      const progressToken = req.params._meta?.progressToken;
      const result = await registry.call(app, req.params.name, req.params.arguments, {
        principal,
        actor: 'mcp',
        signal: ctx.mcpReq.signal,
        progress:
          progressToken === undefined
            ? undefined
            : (progress, total, message) => {
                void ctx.mcpReq
                  .notify({ method: 'notifications/progress', params: { progressToken, progress, total, message } })
                  .catch(() => undefined);
              },
      });
      const key = `${req.params.name}|${result.isError ? (result.structuredContent?.error as { code: string }).code : 'ok'}`;
      stats.calls.set(key, (stats.calls.get(key) ?? 0) + 1);
      return server.projectCallToolResult(result, undefined);
    });
    return server;
  };

  const handler = createMcpHandler(factory, {
    legacy: 'stateless',
    maxRequestBodySize: MCP_MAX_BODY_BYTES, // the SDK's own default is 4 MiB
    onerror: (err) => app.log.debug({ err: err.message }, 'mcp request rejected'),
  });
  const node = toNodeHandler(handler, {
    maxRequestBodySize: MCP_MAX_BODY_BYTES,
    onerror: (err) => app.log.error({ err }, 'mcp adapter failure'),
  });

  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const header = req.headers.authorization ?? '';
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    const principal = m ? app.auth.verifyBearer(m[1]!) : null;
    if (!principal) {
      const challenge = m ? 'Bearer realm="atelier", error="invalid_token", error_description="unknown or revoked token"' : 'Bearer realm="atelier"';
      // No body of an unauthenticated request is read: answer and close, so a trickled body holds nothing.
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': challenge, connection: 'close' });
      res.end(
        JSON.stringify({
          error: {
            code: 'UNAUTHENTICATED',
            message: m
              ? 'the bearer token is unknown or revoked; create one with `atelier token create`'
              : 'an owner bearer token is required: send "Authorization: Bearer <token>" (create one with `atelier token create`)',
            retryable: false,
            details: {},
          },
        }),
      );
      return;
    }
    (req as IncomingMessage & { auth?: unknown }).auth = { token: '[redacted]', clientId: principal, scopes: ['owner'] };
    await node(req as never, res as never);
  };
}
