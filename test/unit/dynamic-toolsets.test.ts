/**
 * The dynamic mode's state (src/mcp/dynamic-toolsets.ts) is bounded: at most maxConnections
 * connections (the least recently used goes first), each dropped after idleMs unused, and a list
 * change reaches only the listen streams of the principal it concerns. The end-to-end behaviour
 * with the official clients is test/e2e/dynamic-toolsets.test.ts; this checks the bounds, which a
 * test through the process could reach only with thousands of sessions.
 */
import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ToolRegistry } from '../../src/mcp/registry.js';
import { CATALOG } from '../../src/tools/index.js';
import { FULL_ACCESS } from '../../src/core/toolsets.js';
import { DynamicToolsets, asksToolsListChanged, type DynamicCaller } from '../../src/mcp/dynamic-toolsets.js';

const registry = new ToolRegistry(CATALOG);
const legacy = (session: string, principal = 'tok_a'): DynamicCaller => ({ principal, access: FULL_ACCESS, dynamic: true, session });
const names = (d: DynamicToolsets, c: DynamicCaller, modern = false) => d.list(c, modern).map((t) => t.name);
const LISTEN = JSON.stringify({ jsonrpc: '2.0', id: 'listen:1', method: 'subscriptions/listen', params: { notifications: { toolsListChanged: true } } });
const requestOf = (principal: string) => ({ auth: { clientId: principal } }) as unknown as IncomingMessage;

describe('the dynamic mode state', () => {
  it('keeps at most maxConnections connections, the least recently used going first', async () => {
    const d = new DynamicToolsets(registry, { maxConnections: 3, idleMs: 60_000, now: Date.now });
    for (let i = 0; i < 5; i++) await d.session(legacy(`s${i}`), false, async () => undefined).enable(['knowledge']);
    expect(d.size).toBe(3);
    expect(names(d, legacy('s0'))).not.toContain('knowledge_list');
    expect(names(d, legacy('s4'))).toContain('knowledge_list');
    // A list is no use: it creates nothing.
    for (let i = 0; i < 50; i++) names(d, legacy(`listed-only-${i}`));
    expect(d.size).toBe(3);
  });

  it('drops a connection unused for idleMs', async () => {
    let now = 1_000_000;
    const d = new DynamicToolsets(registry, { maxConnections: 10, idleMs: 1000, now: () => now });
    await d.session(legacy('s'), false, async () => undefined).enable(['agents']);
    now += 999;
    expect(names(d, legacy('s'))).toContain('agent_spawn');
    now += 1001;
    expect(names(d, legacy('s'))).not.toContain('agent_spawn');
    expect(d.size).toBe(0);
  });

  it('keys a connection by principal and session: the same session id of another token is another connection', async () => {
    const d = new DynamicToolsets(registry);
    await d.session(legacy('same', 'tok_a'), false, async () => undefined).enable(['previews']);
    expect(names(d, legacy('same', 'tok_a'))).toContain('preview_open');
    expect(names(d, legacy('same', 'tok_b'))).not.toContain('preview_open');
  });

  it('sends a 2026-07-28 change to the listen streams of that principal only, and forgets a stream once closed', async () => {
    const d = new DynamicToolsets(registry);
    const got: string[] = [];
    const offA = d.forward(requestOf('tok_a'), LISTEN, () => d.bus.subscribe(() => got.push('a')));
    const offB = d.forward(requestOf('tok_b'), LISTEN, () => d.bus.subscribe(() => got.push('b')));
    // A listen stream not asking for toolsListChanged is not filed.
    d.forward(requestOf('tok_a'), LISTEN.replace('"toolsListChanged":true', '"resourcesListChanged":true'), () => d.bus.subscribe(() => got.push('a-resources')));
    expect(d.listening('tok_a')).toBe(1);
    const modernA: DynamicCaller = { principal: 'tok_a', access: FULL_ACCESS, dynamic: true };
    expect((await d.session(modernA, true).enable(['knowledge'])).notified).toBe(true);
    expect(got).toEqual(['a']);
    offA();
    offB();
    expect(d.listening('tok_a')).toBe(0);
    // No stream: the static list, and nothing to enable.
    expect(d.session(modernA, true).mode).toBe('static');
    expect(names(d, modernA, true).length).toBe(registry.list.length - 1);
  });

  it('reads a listen request only when it is one, and survives any body', () => {
    expect(asksToolsListChanged(LISTEN)).toBe(true);
    for (const body of ['', 'subscriptions/listen', '{"method":"subscriptions/listen"}', '{"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":"yes"}}}', '[' + LISTEN + ']', '{'.repeat(100_000) + 'subscriptions/listen'])
      expect(asksToolsListChanged(body), body.slice(0, 60)).toBe(false);
  });
});
