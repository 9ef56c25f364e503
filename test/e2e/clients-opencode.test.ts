/**
 * opencode (the opencode-linux-x64 binary of opencode-ai, test/clients/) against the real `atelier
 * serve`, driven by its own command line with its own home and XDG directories (issue #45 item 4;
 * docs/clients.md, "opencode"): `opencode mcp add --url --header`, `opencode mcp list`, and a
 * headless turn (`opencode run --format json`) whose model is an OpenAI-compatible provider on
 * loopback (a fake of chat completions): it records the tools opencode gives a model — Atelier's
 * included — and answers with a call of `workspace_list`, which opencode makes against Atelier.
 * Update checks, sharing, model-list fetches and LSP downloads are off; the npm install opencode
 * starts in its config directory is pointed at a closed loopback port, so nothing leaves the machine.
 */
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type Service } from './harness.js';
import { OPENCODE_BIN, clientHome, endAll, fakeChatCompletions, isolatedEnv, listedTools, requireInstalled, runClient, type FakeModel, type ToolDecl, CLIENT_TEST_MS } from './clients-fixture.js';

/** opencode names a server's tool `<server>_<tool>`. */
const PREFIX = 'atelier_';
const CALLED = `${PREFIX}workspace_list`;
const ANSI = /\x1b\[[0-9;]*m/g;

let svc: Service;
let model: FakeModel;

beforeAll(async () => {
  requireInstalled(OPENCODE_BIN);
  [svc, model] = await Promise.all([startService(), fakeChatCompletions(CALLED)]);
}, 180_000);

afterAll(async () => {
  await endAll();
  await model?.close();
  await svc?.dispose();
});

function opencodeHome(): { config: string; project: string; env: Record<string, string> } {
  const home = clientHome('opencode');
  const project = join(home, 'project');
  mkdirSync(project);
  const env = isolatedEnv(home, {
    XDG_CONFIG_HOME: join(home, '.config'),
    XDG_DATA_HOME: join(home, '.local/share'),
    XDG_CACHE_HOME: join(home, '.cache'),
    XDG_STATE_HOME: join(home, '.local/state'),
    OPENCODE_DISABLE_AUTOUPDATE: '1',
    OPENCODE_DISABLE_MODELS_FETCH: '1',
    OPENCODE_DISABLE_SHARE: '1',
    OPENCODE_DISABLE_LSP_DOWNLOAD: '1',
    OPENCODE_DISABLE_DEFAULT_PLUGINS: '1',
    OPENCODE_DISABLE_CLAUDE_CODE: '1',
    OPENCODE_DISABLE_EXTERNAL_SKILLS: '1',
    OPENCODE_PURE: '1',
    OPENCODE_EXPERIMENTAL_DISABLE_FILEWATCHER: '1',
    // opencode installs its plugin package into each config directory in the background: offline,
    // against a port nothing listens on, it fails at once (a logged warning) instead of fetching.
    NPM_CONFIG_OFFLINE: 'true',
    npm_config_registry: 'http://127.0.0.1:9/',
  });
  return { config: join(home, '.config/opencode/opencode.jsonc'), project, env };
}

const opencode = (args: string[], o: { project: string; env: Record<string, string> }) => runClient(OPENCODE_BIN, args, { cwd: o.project, env: o.env });

async function addAtelier(o: ReturnType<typeof opencodeHome>, headers: string[]): Promise<void> {
  const add = await opencode(['mcp', 'add', 'atelier', '--url', svc.mcpUrl, ...headers.flatMap((h) => ['--header', h])], o);
  expect(add.code, `${add.stdout}\n${add.stderr}`).toBe(0);
}

/** Points opencode's model at the fake provider (the config opencode wrote, plus a provider). */
function useFakeModel(o: ReturnType<typeof opencodeHome>): void {
  const config = JSON.parse(readFileSync(o.config, 'utf8'));
  config.provider = { fake: { npm: '@ai-sdk/openai-compatible', name: 'Fake', options: { baseURL: `${model.url}/v1`, apiKey: 'not-a-key' }, models: { m: { name: 'm', tool_call: true } } } };
  config.model = 'fake/m';
  config.autoupdate = false;
  config.share = 'disabled';
  writeFileSync(o.config, JSON.stringify(config, null, 2));
}

async function turn(o: ReturnType<typeof opencodeHome>): Promise<{ tools: Array<{ name: string; description: string; parameters: unknown }>; events: Array<Record<string, any>>; requests: FakeModel['requests'] }> {
  const from = model.requests.length;
  const r = await opencode(['run', '--format', 'json', 'List my workspaces.'], o);
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
  const requests = model.requests.slice(from);
  const withTools = requests.find((q) => Array.isArray(q.body.tools) && (q.body.tools as unknown[]).length > 0);
  expect(withTools, `no model request carried tools: ${requests.length} requests`).toBeDefined();
  const tools = (withTools!.body.tools as Array<{ function: { name: string; description: string; parameters: unknown } }>).map((t) => t.function).filter((f) => f.name.startsWith(PREFIX));
  const events = r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, any>);
  return { tools, events, requests };
}

function expectSameTools(tools: Array<{ name: string; description: string; parameters: unknown }>, listed: ToolDecl[]): void {
  expect(tools.map((t) => t.name).sort()).toEqual(listed.map((t) => PREFIX + t.name).sort());
  const byName = new Map(tools.map((t) => [t.name.slice(PREFIX.length), t]));
  for (const t of listed) {
    expect(byName.get(t.name)!.description, t.name).toBe(t.description);
    expect(byName.get(t.name)!.parameters, t.name).toEqual(t.schema);
  }
}

function expectCalled(events: Array<Record<string, any>>): void {
  const use = events.find((e) => e.type === 'tool_use' && e.part?.tool === CALLED);
  expect(use, JSON.stringify(events).slice(0, 2000)).toBeDefined();
  expect(use!.part.state.status).toBe('completed');
  expect(JSON.parse(use!.part.state.output)).toMatchObject({ workspaces: [] });
}

describe('opencode 1.18.33 against atelier serve', () => {
  it('opencode mcp add writes a remote server with its header, and opencode mcp list connects', async () => {
    const o = opencodeHome();
    await addAtelier(o, [`Authorization=Bearer ${svc.token}`]);
    expect(JSON.parse(readFileSync(o.config, 'utf8')).mcp.atelier).toEqual({ type: 'remote', url: svc.mcpUrl, headers: { Authorization: `Bearer ${svc.token}` } });
    const list = await opencode(['mcp', 'list'], o);
    expect(list.code, list.stderr).toBe(0);
    expect(`${list.stdout}${list.stderr}`.replace(ANSI, '')).toMatch(/✓ atelier\s+connected/);
  }, CLIENT_TEST_MS);

  it('gives the model every tool (names, descriptions and schemas unchanged) and makes a tool call against Atelier', async () => {
    const o = opencodeHome();
    await addAtelier(o, [`Authorization=Bearer ${svc.token}`]);
    useFakeModel(o);
    const [{ tools, events, requests }, listed] = await Promise.all([turn(o), listedTools(svc)]);
    expect(listed.length).toBeGreaterThan(100);
    expectSameTools(tools, listed);
    // OpenAI's function-name rule (64 characters), which opencode's providers pass on.
    for (const t of tools) expect(t.name).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    expectCalled(events);
    const toolMessage = requests.flatMap((q) => (q.body.messages as Array<{ role: string; content: unknown }> | undefined) ?? []).find((m) => m.role === 'tool');
    expect(JSON.stringify(toolMessage)).toContain('workspaces');
  }, CLIENT_TEST_MS);

  it('with X-MCP-Toolsets: code it sees the code preset only', async () => {
    const o = opencodeHome();
    await addAtelier(o, [`Authorization=Bearer ${svc.token}`, 'X-MCP-Toolsets=code']);
    useFakeModel(o);
    const [{ tools, events }, listed] = await Promise.all([turn(o), listedTools(svc, { 'X-MCP-Toolsets': 'code' })]);
    expect(listed.length).toBeLessThan(60);
    expectSameTools(tools, listed);
    expectCalled(events);
  }, CLIENT_TEST_MS);
});
