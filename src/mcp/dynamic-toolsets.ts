/**
 * The dynamic mode (issue #45 item 2; docs/access.md "Dynamic toolsets"): a connection that asks
 * for it (X-MCP-Dynamic-Toolsets: true, or a token made with --dynamic-toolsets) is listed the core
 * tools (CORE_TOOLS: the first-minutes tools of workspace, files, commands and git) and the
 * discovery tools; toolsets_enable adds a
 * toolset to that connection's list and sends notifications/tools/list_changed. The list never
 * shows more than the caller's access, and what is not listed stays callable within that access
 * (the mode saves context; access is the token's: docs/decisions.md).
 *
 * What "a connection" is, in a protocol that serves every request on its own:
 * - 2025-era: the Mcp-Session-Id the client got at initialize (src/mcp/legacy-sessions.ts) and
 *   sends on every request, with the principal. The list change goes on the response stream of the
 *   toolsets_enable call (the 2025-11-25 transport lets a response stream carry notifications
 *   about its request). A client that sends no session id cannot be told of a change: static list.
 * - 2026-07-28: no session exists; nothing but the credential ties one client's requests together,
 *   so the connection is the principal (the token, or the OAuth grant). The list change goes on the
 *   client's subscriptions/listen streams that asked for toolsListChanged (stamped with their
 *   subscription id by the SDK's listen router). While such a stream is open the list is dynamic;
 *   without one a change could not reach the client, so it gets the static list.
 *
 * State: the toolsets enabled per connection, in memory, at most MAX_CONNECTIONS (the least
 * recently used goes first) and dropped after IDLE_MS unused; after a restart every connection
 * starts again from the core. Listen streams are the SDK's (bounded by its maxSubscriptions).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { IncomingMessage } from 'node:http';
import { CORE_TOOLS, DISCOVERY_TOOLSET, toolsetOf, type Access, type ToolsetSession } from '../core/toolsets.js';
import { visibleTools, type PublishedTool, type ToolRegistry } from './registry.js';

/** Connections whose enabled toolsets are kept at most. */
export const MAX_CONNECTIONS = 1000;
/** A connection unused this long starts again from the core. */
export const IDLE_MS = 24 * 60 * 60 * 1000;
/** Longest session id used as a key (longer ones are cut, as the log key does). */
const MAX_SESSION_CHARS = 200;

/** What the auth gate says of a request for the dynamic mode (src/mcp/http.ts authenticate). */
export interface DynamicCaller {
  principal: string;
  access: Access;
  /** Asked for the dynamic mode (the header, else the token's option). */
  dynamic: boolean;
  /** The Mcp-Session-Id the request carries, if any. */
  session?: string;
}

/** The SDK's ServerEventBus (createMcpHandler's `bus` option) as the listen router uses it. */
interface BusEvent {
  kind: string;
}
type Listener = (event: BusEvent) => void;

/** What a request forwarded to the SDK's handler carries, for the listen streams it opens. */
interface Forwarded {
  principal: string;
  /** A subscriptions/listen request asking for toolsListChanged. */
  toolsListen: boolean;
}

interface Connection {
  enabled: Set<string>;
  lastSeen: number;
}

export class DynamicToolsets {
  private readonly connections = new Map<string, Connection>();
  /** Open listen streams that asked for toolsListChanged, per principal. */
  private readonly listeners = new Map<string, Set<Listener>>();
  private readonly forwarded = new AsyncLocalStorage<Forwarded>();

  constructor(
    private readonly registry: ToolRegistry,
    private readonly limits: { maxConnections: number; idleMs: number; now: () => number } = { maxConnections: MAX_CONNECTIONS, idleMs: IDLE_MS, now: Date.now },
  ) {}

  /**
   * The bus for createMcpHandler: the SDK's listen router subscribes each stream's listener while
   * the request that opened it is served (inside `forward`), so the listener is filed under that
   * request's principal, and a change is published to that principal's streams only (never to all).
   */
  readonly bus = {
    publish: (_event: BusEvent): void => undefined,
    subscribe: (listener: Listener): (() => void) => {
      const f = this.forwarded.getStore();
      if (!f?.toolsListen) return () => undefined;
      const set = this.listeners.get(f.principal) ?? new Set<Listener>();
      this.listeners.set(f.principal, set);
      set.add(listener);
      return () => {
        set.delete(listener);
        if (set.size === 0 && this.listeners.get(f.principal) === set) this.listeners.delete(f.principal);
      };
    },
  };

  /** Serves a request forwarded to the SDK's handler (`text`: its body, when read) so a listen stream it opens is filed under its principal. */
  forward<T>(req: IncomingMessage, text: string | undefined, serve: () => T): T {
    const principal = (req as IncomingMessage & { auth?: { clientId?: string } }).auth?.clientId ?? '';
    return this.forwarded.run({ principal, toolsListen: !!text && asksToolsListChanged(text) }, serve);
  }

  /** Open listen streams asking for toolsListChanged, for tests and the state bound's test. */
  listening(principal: string): number {
    return this.listeners.get(principal)?.size ?? 0;
  }

  /** Connections with enabled toolsets kept now. */
  get size(): number {
    return this.connections.size;
  }

  /**
   * The session of one request: its mode and, in dynamic mode, the connection's key. `modern`: a
   * 2026-07-28 request. `notify`: sends a notification on this request's response stream (2025-era).
   */
  session(caller: DynamicCaller, modern: boolean, notify?: (n: { method: string }) => Promise<void>): ToolsetSession & { key?: string } {
    const { mode, key, reason } = this.modeOf(caller, modern);
    const available = () => this.available(caller.access);
    return {
      mode,
      reason,
      key,
      available,
      enabled: () => (key ? [...(this.get(key)?.enabled ?? [])].sort() : []),
      enable: async (toolsets) => {
        if (mode !== 'dynamic' || !key) return { added: [], notified: false };
        const c = this.touch(key, true)!;
        const added = toolsets.filter((t) => !c.enabled.has(t) && t !== DISCOVERY_TOOLSET).sort();
        for (const t of added) c.enabled.add(t);
        if (added.length === 0) return { added, notified: false };
        return { added, notified: await this.announce(caller.principal, modern, notify) };
      },
    };
  }

  /** The tools/list of one request. */
  list(caller: DynamicCaller, modern: boolean): PublishedTool[] {
    const all = visibleTools(this.registry, caller.access);
    const { mode, key } = this.modeOf(caller, modern);
    if (mode === 'off') return all.filter((t) => this.toolsetOf(t.name) !== DISCOVERY_TOOLSET);
    // Static: the whole list, and toolsets_list to say why.
    if (mode === 'static') return all.filter((t) => this.toolsetOf(t.name) !== DISCOVERY_TOOLSET || t.name === 'toolsets_list');
    const enabled = (key && this.touch(key, false)?.enabled) || new Set<string>();
    return all.filter((t) => {
      const ts = this.toolsetOf(t.name) ?? '';
      return ts === DISCOVERY_TOOLSET || CORE_TOOLS.has(t.name) || enabled.has(ts);
    });
  }

  private modeOf(caller: DynamicCaller, modern: boolean): { mode: ToolsetSession['mode']; key?: string; reason?: string } {
    if (!caller.dynamic) return { mode: 'off' };
    if (modern) {
      if (this.listening(caller.principal) > 0) return { mode: 'dynamic', key: `${caller.principal}|2026` };
      return {
        mode: 'static',
        reason:
          'no subscriptions/listen stream asking for toolsListChanged is open for this token, so a list change could not reach this client and it gets the static list; listen with toolsListChanged, then list tools again',
      };
    }
    if (caller.session) return { mode: 'dynamic', key: `${caller.principal}|${caller.session.slice(0, MAX_SESSION_CHARS)}` };
    return { mode: 'static', reason: 'this client sends no Mcp-Session-Id, so a list change cannot be tied to it and it gets the static list' };
  }

  private available(access: Access): Array<{ toolset: string; tools: string[] }> {
    const by = new Map<string, string[]>();
    for (const t of visibleTools(this.registry, access)) {
      const ts = this.toolsetOf(t.name);
      if (!ts || ts === DISCOVERY_TOOLSET) continue;
      by.set(ts, [...(by.get(ts) ?? []), t.name]);
    }
    return [...by].map(([toolset, tools]) => ({ toolset, tools }));
  }

  private toolsetOf(tool: string): string | undefined {
    const def = this.registry.get(tool);
    return def ? toolsetOf(def) : undefined;
  }

  private get(key: string): Connection | undefined {
    const c = this.connections.get(key);
    if (c && this.limits.now() - c.lastSeen > this.limits.idleMs) {
      this.connections.delete(key);
      return undefined;
    }
    return c;
  }

  /** The connection's state, most recently used last; created when `create`. Bounded: the least recently used goes first. */
  private touch(key: string, create: boolean): Connection | undefined {
    let c = this.get(key);
    if (!c && !create) return undefined;
    c ??= { enabled: new Set(), lastSeen: 0 };
    c.lastSeen = this.limits.now();
    this.connections.delete(key);
    this.connections.set(key, c);
    while (this.connections.size > this.limits.maxConnections) this.connections.delete(this.connections.keys().next().value!);
    return c;
  }

  /** Sends the list change: on this call's stream (2025-era) or on the principal's listen streams (2026-07-28). */
  private async announce(principal: string, modern: boolean, notify?: (n: { method: string }) => Promise<void>): Promise<boolean> {
    if (!modern) {
      if (!notify) return false;
      return notify({ method: 'notifications/tools/list_changed' }).then(
        () => true,
        () => false,
      );
    }
    const set = this.listeners.get(principal);
    if (!set?.size) return false;
    for (const l of [...set]) l({ kind: 'tools_list_changed' });
    return true;
  }
}

/** Whether a request body is a subscriptions/listen asking for toolsListChanged (parsed only when it names the method). */
export function asksToolsListChanged(text: string): boolean {
  if (!text.includes('subscriptions/listen')) return false;
  try {
    const m = JSON.parse(text) as { method?: unknown; params?: { notifications?: { toolsListChanged?: unknown } } };
    return m?.method === 'subscriptions/listen' && m.params?.notifications?.toolsListChanged === true;
  } catch {
    return false;
  }
}
