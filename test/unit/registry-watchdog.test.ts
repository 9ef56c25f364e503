/**
 * The registry logs a tool call that is still running after SLOW_CALL_MS (warn, "tool call still
 * running", with the tool, the workspace and how long so far), again at each further interval, and
 * stops once the call has answered: what an operator, or a CI timeout's log dump, needs to tell which
 * call hangs. Checked on the real ToolRegistry with a tool of its own and fake timers.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { SLOW_CALL_MS, ToolRegistry, type RegistryHost } from '../../src/mcp/registry.js';
import { defineTool } from '../../src/tools/define.js';

afterEach(() => vi.useRealTimers());

describe('the slow-call watchdog', () => {
  it('warns while a call runs past SLOW_CALL_MS, naming tool and workspace, and stops at the answer', async () => {
    vi.useFakeTimers();
    let finish!: () => void;
    const gate = new Promise<void>((r) => (finish = r));
    const probe = defineTool({
      name: 'slow_probe',
      domain: 'test',
      badges: ['readOnly'],
      tracking: 'test',
      description: 'waits for the test',
      input: { workspaceId: z.string() },
      run: async () => {
        await gate;
        return { done: true };
      },
    });
    const registry = new ToolRegistry([probe as never]);
    const warnings: Array<{ fields: Record<string, unknown>; msg: string }> = [];
    const log = { warn: (fields: Record<string, unknown>, msg: string) => warnings.push({ fields, msg }), info: () => undefined, debug: () => undefined, error: () => undefined };
    const host = { log, auth: { ownerId: 'owner' }, environments: { redact: <T>(v: T) => v } } as unknown as RegistryHost;
    const call = registry.call(host, 'slow_probe', { workspaceId: 'ws_slow' }, { principal: 'owner', actor: 'mcp' } as never);

    await vi.advanceTimersByTimeAsync(SLOW_CALL_MS - 1);
    expect(warnings).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(warnings).toEqual([{ fields: { tool: 'slow_probe', workspaceId: 'ws_slow', ms: SLOW_CALL_MS }, msg: 'tool call still running' }]);
    await vi.advanceTimersByTimeAsync(SLOW_CALL_MS);
    expect(warnings.map((w) => w.fields.ms)).toEqual([SLOW_CALL_MS, 2 * SLOW_CALL_MS]);

    finish();
    const result = await call;
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toEqual({ done: true });
    await vi.advanceTimersByTimeAsync(5 * SLOW_CALL_MS);
    expect(warnings).toHaveLength(2);
  });

  it('a quick call, and a refused one, leave no timer and log nothing', async () => {
    vi.useFakeTimers();
    const quick = defineTool({ name: 'quick_probe', domain: 'test', badges: ['readOnly'], tracking: 'test', description: 'answers at once', input: {}, run: async () => ({ ok: 1 }) });
    const registry = new ToolRegistry([quick as never]);
    const warnings: unknown[] = [];
    const log = { warn: (...a: unknown[]) => warnings.push(a), info: () => undefined, debug: () => undefined, error: () => undefined };
    const host = { log, auth: { ownerId: 'owner' }, environments: { redact: <T>(v: T) => v } } as unknown as RegistryHost;
    expect((await registry.call(host, 'quick_probe', {}, { principal: 'owner', actor: 'mcp' } as never)).isError).toBeFalsy();
    expect((await registry.call(host, 'quick_probe', { extra: 1 }, { principal: 'owner', actor: 'mcp' } as never)).isError).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(3 * SLOW_CALL_MS);
    expect(warnings).toEqual([]);
  });
});
