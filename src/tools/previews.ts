/**
 * Preview URLs (issue #33 item 4): beyond the spec's 107 tools, in a domain and toolset of their
 * own (`previews`). A preview is a signed, expiring, revocable link on the service's origin to one
 * port a server inside the workspace listens on (HTTP and WebSocket); see docs/workspaces.md.
 */
import { defineTool } from './define.js';
import { CUR, IDEM, WSID, idOf, int, str, z } from './types.js';
import { PREVIEW_DEFAULT_TTL_S, PREVIEW_MAX_TTL_S } from '../services/previews/index.js';

export const PREVIEWS_DOMAIN = 'Preview URLs (beyond the spec)';
const domain = PREVIEWS_DOMAIN;
const tracking = 'preview URLs' as const;
const PRVID = idOf('prv_', 20, 80, 'Preview');

export const previewOpen = defineTool({
  name: 'preview_open',
  domain,
  badges: [],
  tracking,
  workspace: 'optional',
  description:
    'Link <origin>/p/<previewId>.<signature>/ to a port a server in the workspace listens on (HTTP, WebSocket). ' +
    'Owner only, expiring after ttlSeconds; public: true needs the owner\'s consent on the dashboard. Apps get the /p/... path: use relative URLs. Revoke: preview_revoke.',
  input: {
    port: int(1, 65535).describe('Listening on 127.0.0.1 or ::1; not 3128'),
    ttlSeconds: int(60, PREVIEW_MAX_TTL_S).default(PREVIEW_DEFAULT_TTL_S),
    public: z.boolean().default(false),
    label: str(1, 80).optional().describe('Shown on the dashboard'),
    idempotencyKey: IDEM.optional(),
  },
  idempotency: 'key',
  run: (a, ctx) => ctx.services.previews.open(ctx.owner, ctx.workspace, a, { actor: ctx.actor, principal: ctx.principal }) as unknown as Record<string, unknown>,
});

export const previewList = defineTool({
  name: 'preview_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description:
    'Preview links with port, expiry, access (owner/public), URL; open ones unless includeClosed; workspaceId narrows.',
  input: {
    workspaceId: WSID.optional(),
    includeClosed: z.boolean().default(false),
    limit: int(1, 100).default(50),
    cursor: CUR.optional(),
  },
  run: (a, ctx) => ctx.services.previews.list(ctx.owner, a) as unknown as Record<string, unknown>,
});

export const previewRevoke = defineTool({
  name: 'preview_revoke',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  description: 'Revoke a preview now: its links stop and open connections (WebSockets too) close. Already revoked: alreadyRevoked true.',
  input: {
    previewId: PRVID,
  },
  run: (a, ctx) => ctx.services.previews.revoke(ctx.owner, a.previewId, { actor: ctx.actor, principal: ctx.principal }),
});

export const tools = [previewOpen, previewList, previewRevoke];
