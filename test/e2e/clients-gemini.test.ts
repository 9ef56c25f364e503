/**
 * The Gemini CLI (@google/gemini-cli, test/clients/) against the real `atelier serve`, driven by its
 * own command line with a home of its own (issue #45 item 4; docs/clients.md, "Gemini CLI"):
 * `gemini mcp add --transport http … --header`, `gemini mcp list` (connect and ping), and a headless
 * turn (`gemini -p`) whose model is a loopback fake of the Gemini API: it records the function
 * declarations the CLI sends a model — Atelier's tools as the CLI rewrites them — and answers with
 * a call of `workspace_list`, which the CLI makes against Atelier and answers with its result.
 * Telemetry, usage statistics and update checks are off in the settings; nothing leaves the machine.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type Service } from './harness.js';
import { GEMINI_BIN, clientHome, endAll, fakeGeminiApi, isolatedEnv, listedTools, requireInstalled, runClient, type FakeModel, type ToolDecl, CLIENT_TEST_MS } from './clients-fixture.js';

/** The CLI names a server's tool `mcp_<server>_<tool>` and cuts names past 63 characters. */
const PREFIX = 'mcp_atelier_';
const CALLED = `${PREFIX}workspace_list`;

let svc: Service;
let model: FakeModel;

beforeAll(async () => {
  requireInstalled(GEMINI_BIN);
  [svc, model] = await Promise.all([startService(), fakeGeminiApi(CALLED)]);
}, 180_000);

afterAll(async () => {
  await endAll();
  await model?.close();
  await svc?.dispose();
});

/** A home with user settings that keep the CLI quiet and local, and a project directory to run in. */
function geminiHome(): { home: string; project: string; env: Record<string, string> } {
  const home = clientHome('gemini');
  mkdirSync(join(home, '.gemini'));
  writeFileSync(
    join(home, '.gemini/settings.json'),
    JSON.stringify({
      security: { auth: { selectedType: 'gemini-api-key' } },
      general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
      privacy: { usageStatisticsEnabled: false },
      telemetry: { enabled: false },
    }),
  );
  const project = join(home, 'project');
  mkdirSync(project);
  const env = isolatedEnv(home, {
    // MCP servers are off in an untrusted folder; a headless run cannot show the trust dialog.
    GEMINI_CLI_TRUST_WORKSPACE: 'true',
    GEMINI_CLI_NO_RELAUNCH: 'true',
    GEMINI_API_KEY: 'not-a-key',
    GOOGLE_GEMINI_BASE_URL: model.url,
  });
  return { home, project, env };
}

const gemini = (args: string[], g: { project: string; env: Record<string, string> }) => runClient(process.execPath, [GEMINI_BIN, ...args], { cwd: g.project, env: g.env });

async function addAtelier(g: ReturnType<typeof geminiHome>, headers: string[]): Promise<void> {
  const add = await gemini(['mcp', 'add', '--scope', 'user', '--transport', 'http', 'atelier', svc.mcpUrl, ...headers.flatMap((h) => ['--header', h])], g);
  expect(add.code, add.stderr).toBe(0);
}

/** One headless turn; returns the Atelier declarations of the first model request that carried tools, and the CLI's JSON output. */
async function turn(g: ReturnType<typeof geminiHome>): Promise<{ decls: Array<{ name: string; description: string; parametersJsonSchema: Record<string, unknown> }>; out: Record<string, any>; requests: FakeModel['requests'] }> {
  const from = model.requests.length;
  // -m names the model, so the CLI's router (a classifier request of its own) is not asked.
  const r = await gemini(['-p', 'List my workspaces.', '-m', 'gemini-2.5-flash', '--approval-mode', 'yolo', '-o', 'json'], g);
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
  const requests = model.requests.slice(from);
  const withTools = requests.find((q) => Array.isArray(q.body.tools));
  expect(withTools, `no model request carried tools: ${requests.map((q) => q.path).join(', ')}`).toBeDefined();
  const all = (withTools!.body.tools as Array<{ functionDeclarations?: any[] }>).flatMap((t) => t.functionDeclarations ?? []);
  return { decls: all.filter((d) => d.name.startsWith(PREFIX)), out: JSON.parse(r.stdout), requests };
}

/** The CLI adds one optional parameter of its own to every tool; without it the schema must be Atelier's. */
function withoutCliParameter(schema: Record<string, any>): unknown {
  const copy = structuredClone(schema);
  expect(copy.properties?.wait_for_previous?.type).toBe('boolean');
  delete copy.properties.wait_for_previous;
  return copy;
}

function expectSameTools(decls: Array<{ name: string; description: string; parametersJsonSchema: Record<string, unknown> }>, listed: ToolDecl[]): void {
  expect(decls.map((d) => d.name).sort()).toEqual(listed.map((t) => PREFIX + t.name).sort());
  const byName = new Map(decls.map((d) => [d.name.slice(PREFIX.length), d]));
  for (const t of listed) {
    const d = byName.get(t.name)!;
    expect(d.description, t.name).toBe(t.description);
    expect(withoutCliParameter(d.parametersJsonSchema), t.name).toEqual(t.schema);
  }
}

describe('Gemini CLI 0.61.0 against atelier serve', () => {
  it('gemini mcp add writes the server with its header, and gemini mcp list connects', async () => {
    const g = geminiHome();
    await addAtelier(g, [`Authorization: Bearer ${svc.token}`]);
    const settings = JSON.parse(readFileSync(join(g.home, '.gemini/settings.json'), 'utf8'));
    expect(settings.mcpServers.atelier).toEqual({ url: svc.mcpUrl, type: 'http', headers: { Authorization: `Bearer ${svc.token}` } });
    const list = await gemini(['mcp', 'list'], g);
    expect(list.code, list.stderr).toBe(0);
    expect(`${list.stdout}${list.stderr}`).toContain(`✓ atelier: ${svc.mcpUrl} (http) - Connected`);
    // A wrong token is told apart: the same list shows it disconnected.
    const bad = geminiHome();
    const badSettings = join(bad.home, '.gemini/settings.json');
    writeFileSync(badSettings, JSON.stringify({ ...JSON.parse(readFileSync(badSettings, 'utf8')), mcpServers: { atelier: { ...settings.mcpServers.atelier, headers: { Authorization: 'Bearer atl_not-a-token' } } } }));
    const badList = await gemini(['mcp', 'list'], bad);
    expect(`${badList.stdout}${badList.stderr}`).toContain(`✗ atelier: ${svc.mcpUrl} (http) - Disconnected`);
  }, CLIENT_TEST_MS);

  it('gives the model every tool (names, descriptions and schemas unchanged) and makes a tool call against Atelier', async () => {
    const g = geminiHome();
    await addAtelier(g, [`Authorization: Bearer ${svc.token}`]);
    const [{ decls, out, requests }, listed] = await Promise.all([turn(g), listedTools(svc)]);
    expect(listed.length).toBeGreaterThan(100);
    expectSameTools(decls, listed);
    // Every name fits the CLI's 63-character cut and the Gemini API's name rule, so none is rewritten.
    for (const d of decls) expect(d.name).toMatch(/^[A-Za-z_][\w.:-]{0,62}$/);
    // The call: made (YOLO approves it), succeeded, and its result went back to the model.
    expect(out.stats.tools.byName[CALLED]).toMatchObject({ count: 1, success: 1, fail: 0 });
    const answer = requests.map((q) => JSON.stringify(q.body.contents ?? [])).find((c) => c.includes('"functionResponse"'));
    expect(answer).toBeDefined();
    expect(answer).toContain('workspaces');
    expect(out.response).toBe('done');
  }, CLIENT_TEST_MS);

  // The CLI adds `wait_for_previous` to every tool's schema, tells its model to set it on dependent
  // calls, and passes it on to the server; Atelier drops that one argument (boolean) before its
  // strict check (src/tools/validate.ts CLIENT_ARGUMENTS), so the call reaches the tool.
  it('a call on which the model set the CLI\'s own wait_for_previous still reaches the tool', async () => {
    const g = geminiHome();
    await addAtelier(g, [`Authorization: Bearer ${svc.token}`]);
    model.callArgs = { wait_for_previous: true };
    try {
      const { out } = await turn(g);
      expect(out.stats.tools.byName[CALLED]).toMatchObject({ count: 1, success: 1 });
    } finally {
      model.callArgs = {};
    }
  }, CLIENT_TEST_MS);

  it('with X-MCP-Toolsets: code it sees the code preset only', async () => {
    const g = geminiHome();
    await addAtelier(g, [`Authorization: Bearer ${svc.token}`, 'X-MCP-Toolsets: code']);
    const [{ decls, out }, listed] = await Promise.all([turn(g), listedTools(svc, { 'X-MCP-Toolsets': 'code' })]);
    expect(listed.length).toBeLessThan(60);
    expectSameTools(decls, listed);
    expect(out.stats.tools.byName[CALLED]).toMatchObject({ success: 1 });
  }, CLIENT_TEST_MS);
});
