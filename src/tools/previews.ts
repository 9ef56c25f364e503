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
    'Open a preview link to a port a server inside the workspace listens on (HTTP and WebSocket), e.g. a dev server started with tasks_run on port 5173. ' +
    'The link is <origin>/p/<previewId>.<signature>/ and reaches exactly that port, through the workspace daemon (the workspace keeps no inbound network). ' +
    `It opens for the owner only (dashboard session or bearer token) and expires after ttlSeconds (default ${PREVIEW_DEFAULT_TTL_S}, at most ${PREVIEW_MAX_TTL_S}). ` +
    'public: true asks for a public link, which exists only once the owner consents on the dashboard. Apps are served under the /p/... path: use relative URLs. Revoke with preview_revoke.',
  input: {
    port: int(1, 65535).describe('Port a server inside the workspace listens on (127.0.0.1 or ::1); not 3128 (the egress bridge)'),
    ttlSeconds: int(60, PREVIEW_MAX_TTL_S).default(PREVIEW_DEFAULT_TTL_S).describe(`Seconds until the link expires (60-${PREVIEW_MAX_TTL_S})`),
    public: z.boolean().default(false).describe('Ask the owner for a public link (it needs the owner\'s consent on the dashboard)'),
    label: str(1, 80).optional().describe('A name shown on the dashboard (1-80 characters)'),
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
    'List preview links (open ones by default; includeClosed adds revoked and expired) with their port, expiry, access (owner or public) and URL, a page at a time. ' +
    'Give workspaceId to list one workspace\'s previews only.',
  input: {
    workspaceId: WSID.optional().describe('Only this workspace\'s previews'),
    includeClosed: z.boolean().default(false).describe('Also list revoked and expired previews'),
    limit: int(1, 100).default(50).describe('Page size (1-100)'),
    cursor: CUR.optional(),
  },
  run: (a, ctx) => ctx.services.previews.list(ctx.owner, a) as unknown as Record<string, unknown>,
});

export const previewRevoke = defineTool({
  name: 'preview_revoke',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  description: 'Revoke a preview link at once: its owner and public links stop working and its open connections (WebSockets too) are closed. Revoking a revoked preview is a no-op (alreadyRevoked: true).',
  input: {
    previewId: PRVID,
  },
  run: (a, ctx) => ctx.services.previews.revoke(ctx.owner, a.previewId, { actor: ctx.actor, principal: ctx.principal }),
});

export const tools = [previewOpen, previewList, previewRevoke];
