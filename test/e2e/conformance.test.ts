/**
 * The MCP conformance suite (@modelcontextprotocol/conformance 0.1.13, the last version that runs on
 * Node 20) against the real `atelier serve`: the server scenarios a general server can pass.
 * 0.1.13 sends no credentials of its own: it only takes a URL, so it gets a token made with
 * `atelier token create --read-only --allow-in-url` as the `access_token` query parameter
 * (RFC 6750 section 2.3), the documented way (docs/clients.md).
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { ROOT, call, runCli, startService, type Service } from './harness.js';

const SUITE = join(ROOT, 'node_modules/@modelcontextprotocol/conformance/dist/index.js');
const SCENARIOS = ['server-initialize', 'ping', 'tools-list', 'logging-set-level', 'dns-rebinding-protection'];

let svc: Service;
let url: string;

beforeAll(async () => {
  svc = await startService({ args: ['--unsafe-dev-no-sandbox'] });
  const r = await runCli(['token', 'create', '--name', 'conformance', '--read-only', '--allow-in-url', '--json', '--data-dir', svc.dataDir]);
  expect(r.code).toBe(0);
  url = `${svc.mcpUrl}?access_token=${JSON.parse(r.stdout).token}`;
}, 60_000);
afterAll(async () => {
  await svc?.dispose();
});

function runSuite(args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [SUITE, ...args], { timeout: 90_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: stdout + stderr });
    });
  });
}

describe('MCP conformance suite 0.1.13, server scenarios', () => {
  it('is version 0.1.13', async () => {
    const r = await runSuite(['--version']);
    expect(r.out.trim()).toBe('0.1.13');
  });

  for (const scenario of SCENARIOS) {
    it(`passes ${scenario}`, async () => {
      const r = await runSuite(['server', '--url', url, '--scenario', scenario]);
      expect(r.out, r.out).not.toMatch(/FAILURE/);
      expect(r.out).toMatch(/SUCCESS/);
      expect(r.code, r.out).toBe(0);
    }, 120_000);
  }

  it('the query token is refused for full tokens, and a read-only URL token cannot call destructive tools', async () => {
    const full = await runSuite(['server', '--url', `${svc.mcpUrl}?access_token=${svc.token}`, '--scenario', 'server-initialize']);
    expect(full.out).toMatch(/FAILURE/);
    const bad = await runCli(['token', 'create', '--allow-in-url', '--data-dir', svc.dataDir]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--allow-in-url needs --read-only/);
    const c = new Client({ name: 'url-token', version: '1' });
    await c.connect(new StreamableHTTPClientTransport(new URL(url)));
    const tools = (await c.listTools()).tools;
    expect(tools.every((t) => t.annotations?.readOnlyHint === true)).toBe(true);
    const r = await call(c, 'workspace_close', { workspaceId: 'ws_aaaaaaaaaaaaaaaaaaaaaaaa' });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.code).toBe('PERMISSION_DENIED');
    await c.close();
  }, 120_000);
});
