/**
 * MCP logging (notifications/message): the capability is declared, `logging/setLevel` is honoured,
 * and long work sends log messages only where the client asked for them (a level set with
 * logging/setLevel by this caller, or the per-request log level of 2026-07-28 clients).
 * Stateless HTTP gives every request a new Server, so levels are kept here per caller.
 */
import { LOG_LEVEL_META_KEY } from '@modelcontextprotocol/server';

export type McpLogLevel = 'debug' | 'info' | 'notice' | 'warning' | 'error' | 'critical' | 'alert' | 'emergency';
export const LOG_LEVELS: McpLogLevel[] = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];

/** A notifier services and tools call for milestones of long work; a no-op when nobody listens. */
export type LogNotifier = (level: McpLogLevel, message: string, data?: Record<string, unknown>) => void;

const MAX_CALLERS = 10_000;

export class McpLogLevels {
  private readonly levels = new Map<string, McpLogLevel>();

  set(key: string, level: McpLogLevel): void {
    this.levels.delete(key);
    this.levels.set(key, level);
    // Bounded: the oldest callers are forgotten first.
    while (this.levels.size > MAX_CALLERS) this.levels.delete(this.levels.keys().next().value!);
  }

  get(key: string): McpLogLevel | undefined {
    return this.levels.get(key);
  }
}

/** What a request's log messages and progress go out through: the SDK's handler context, or the direct path's equivalent. */
export interface McpNotifyContext {
  mcpReq: {
    notify: (
      n:
        | { method: 'notifications/message'; params: { level: McpLogLevel; logger?: string; data: unknown } }
        | { method: 'notifications/progress'; params: { progressToken: string | number; progress: number; total?: number; message?: string } },
    ) => Promise<void>;
    envelope?: Record<string, unknown>;
  };
}

/** The logger of one request: sends at or above the caller's threshold, nothing when no threshold was asked. */
export function mcpLogger(c: McpNotifyContext, stored: McpLogLevel | undefined, logger: string): LogNotifier {
  const perRequest = c.mcpReq.envelope?.[LOG_LEVEL_META_KEY] as McpLogLevel | undefined;
  const threshold = perRequest && LOG_LEVELS.includes(perRequest) ? perRequest : stored;
  if (!threshold) return () => undefined;
  const min = LOG_LEVELS.indexOf(threshold);
  return (level, message, data) => {
    if (LOG_LEVELS.indexOf(level) < min) return;
    void c.mcpReq.notify({ method: 'notifications/message', params: { level, logger: `atelier.${logger}`, data: data ? { message, ...data } : message } }).catch(() => undefined);
  };
}
