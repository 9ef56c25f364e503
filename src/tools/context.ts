import type { App } from '../app.js';

/** What a tool handler gets besides its validated arguments. */
export interface ToolContext {
  /** The composition root: services and configuration. Handlers call services, never the store. */
  app: App;
  /** The single owner principal every record is bound to. */
  owner: string;
  /** Who is acting, for audit: 'mcp' for MCP calls. */
  actor: 'mcp' | 'dashboard' | 'cli' | 'system';
  /** Identifies the authenticating bearer token (never the token itself). */
  principal: string;
  /** Aborts when the client goes away or cancels. */
  signal: AbortSignal;
  /** Reports progress on long work (sent as MCP progress notifications when the client asked). */
  progress: (progress: number, total?: number, message?: string) => void;
  /** Resolves an omitted workspaceId to the caller's active workspace (or a clear error). */
  workspaceId: (given: string | undefined) => string;
}
