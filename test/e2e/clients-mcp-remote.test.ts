/**
 * mcp-remote (test/clients/), the stdio bridge that clients speaking only stdio (Claude Desktop's
 * config, older Cursor and Windsurf setups) use to reach a remote server, against the real
 * `atelier serve` (issue #45 item 4; docs/clients.md, "mcp-remote"). The stdio side is driven as
 * such a client drives it: the official MCP SDK's StdioClientTransport starts
 * `mcp-remote <url> --header "Authorization: Bearer …"` and speaks MCP on its stdin/stdout; the
 * bridge speaks Streamable HTTP to Atelier. Its OAuth files go to a home of its own.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { call, dashboardLogin, httpRequest, startService, type Service } from './harness.js';
import { MCP_REMOTE_BIN, clientHome, isolatedEnv, listedTools, requireInstalled, CLIENT_TEST_MS } from './clients-fixture.js';

let svc: Service;
const open: ClientV1[] = [];

beforeAll(async () => {
  requireInstalled(MCP_REMOTE_BIN);
  svc = await startService();
}, 180_000);

afterEach(async () => {
  // Closing the client ends the bridge (the SDK closes its stdin, then signals it).
  await Promise.all(open.splice(0).map((c) => c.close()));
});

afterAll(async () => {
  await svc?.dispose();
});

/** Plays the owner's browser on Atelier's consent page (logged in to the dashboard): approves, returns the client's callback URL. */
async function approveAsOwner(authUrl: URL): Promise<URL> {
  const { cookie } = await dashboardLogin(svc);
  const a = await httpRequest(svc.url, 'GET', authUrl.pathname + authUrl.search);
  expect(a.status, a.body).toBe(303);
  const page = await httpRequest(svc.url, 'GET', String(a.headers.location), { cookie });
  expect(page.status, page.body).toBe(200);
  const request = /name="request" value="([^"]+)"/.exec(page.body)![1]!;
  const csrf = /name="csrf" value="([^"]+)"/.exec(page.body)![1]!;
  const ticked = Object.fromEntries([...page.body.matchAll(/name="(ts_[a-z-]+|readonly)" value="on" checked/g)].map((m) => [m[1]!, 'on']));
  const post = await httpRequest(svc.url, 'POST', '/oauth/consent', { cookie, 'content-type': 'application/x-www-form-urlencoded' }, new URLSearchParams({ request, csrf, decision: 'approve', ...ticked }).toString());
  expect(post.status, post.body).toBe(303);
  return new URL(String(post.headers.location));
}

/** Starts the bridge as a stdio client would, with the given headers (each `Name: value`). */
async function bridge(headers: string[], extraArgs: string[] = []): Promise<{ client: ClientV1; stderr: () => string }> {
  const home = clientHome('mcp-remote');
  mkdirSync(join(home, '.mcp-auth'));
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [MCP_REMOTE_BIN, svc.mcpUrl, ...headers.flatMap((h) => ['--header', h]), '--transport', 'http-only', ...extraArgs],
    env: isolatedEnv(home, { MCP_REMOTE_CONFIG_DIR: join(home, '.mcp-auth') }),
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr!.on('data', (d) => (stderr += d));
  const client = new ClientV1({ name: 'stdio-only-client', version: '1.0.0' });
  open.push(client);
  await client.connect(transport);
  return { client, stderr: () => stderr };
}

describe('mcp-remote 0.15.1 against atelier serve', () => {
  it('bridges initialize, the whole tool list (unchanged) and a tool call', async () => {
    const { client, stderr } = await bridge([`Authorization: Bearer ${svc.token}`]);
    expect(client.getServerVersion()?.name).toBe('atelier');
    const [{ tools }, listed] = await Promise.all([client.listTools(), listedTools(svc)]);
    expect(listed.length).toBeGreaterThan(100);
    expect(tools.map((t) => ({ name: t.name, description: t.description, schema: t.inputSchema }))).toEqual(listed);
    const r = await call(client, 'workspace_list', {});
    expect(r.ok && r.result).toMatchObject({ workspaces: [] });
    expect(stderr()).toContain('Connected to remote server using StreamableHTTPClientTransport');
  }, CLIENT_TEST_MS);

  it('passes X-MCP-Toolsets on, and a header without a space after the colon (the form for clients that split arguments on spaces)', async () => {
    const { client } = await bridge([`Authorization:Bearer ${svc.token}`, 'X-MCP-Toolsets:code']);
    const [{ tools }, listed] = await Promise.all([client.listTools(), listedTools(svc, { 'X-MCP-Toolsets': 'code' })]);
    expect(listed.length).toBeLessThan(60);
    expect(tools.map((t) => t.name)).toEqual(listed.map((t) => t.name));
    // A tool outside the preset is refused by Atelier, and the refusal comes back through the bridge.
    const r = await call(client, 'knowledge_list', {});
    expect(r.ok).toBe(false);
  }, CLIENT_TEST_MS);

  it('without a token it signs in by OAuth: finds the metadata, registers itself, and connects once the owner approves', async () => {
    const home = clientHome('mcp-remote-oauth');
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [MCP_REMOTE_BIN, svc.mcpUrl, '--transport', 'http-only', '--host', '127.0.0.1', '--auth-timeout', '60'],
      // BROWSER: the page it would open is played below by raw HTTP, as the owner's browser.
      env: isolatedEnv(home, { MCP_REMOTE_CONFIG_DIR: join(home, '.mcp-auth'), BROWSER: 'true' }),
      stderr: 'pipe',
    });
    let stderr = '';
    transport.stderr!.on('data', (d) => (stderr += d));
    const client = new ClientV1({ name: 'stdio-only-client', version: '1.0.0' });
    open.push(client);
    const connected = client.connect(transport, { timeout: 90_000 });
    const authorize = new RegExp(`${svc.url.replace(/[.]/g, '\\.')}/oauth/authorize\\?\\S+`);
    for (let i = 0; i < 300 && !authorize.test(stderr); i++) await new Promise((r) => setTimeout(r, 100));
    const authUrl = new URL(authorize.exec(stderr)?.[0] ?? `${svc.url}/missing-authorize-url: ${stderr}`);
    expect(authUrl.searchParams.get('client_id')).toMatch(/^oauthc_/);
    expect(authUrl.searchParams.get('code_challenge_method')).toBe('S256');
    const callback = await approveAsOwner(authUrl);
    expect(callback.searchParams.get('code')).toBeTruthy();
    const landed = await fetch(callback);
    expect(landed.status).toBe(200);
    await connected;
    const [{ tools }, listed] = await Promise.all([client.listTools(), listedTools(svc)]);
    expect(tools.map((t) => t.name)).toEqual(listed.map((t) => t.name));
    const r = await call(client, 'workspace_list', {});
    expect(r.ok && r.result).toMatchObject({ workspaces: [] });
  }, CLIENT_TEST_MS);
});
