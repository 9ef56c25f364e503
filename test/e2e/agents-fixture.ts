/**
 * Shared set-up for the agent tests: a git host with a small repository, `atelier serve` with
 * provider_a pointed at the scripted fake agent provider, an owner credential and two active
 * profiles (chat-completions and responses), an MCP client and an open workspace.
 */
import { expect } from 'vitest';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { startGitHost, type GitHost } from '../fixtures/githost.js';
import { startFakeAgentProvider, type FakeAgentProvider } from '../fixtures/fake-agent-provider.js';
import { call, connectV2, dashboardLogin, httpRequest, type Service } from './harness.js';
import { startWorkspaceService } from './workspace-fixture.js';

export const PROVIDER_KEY = 'sk-agent-test-provider-key-0123456789abcdef';
export const PRICING = { inputMicrosPerMillionTokens: 2_000_000, outputMicrosPerMillionTokens: 8_000_000, cachedReadMicrosPerMillionTokens: 500_000, cachedWriteMicrosPerMillionTokens: null };
export const LIMITS = { maxInputTokens: 2_000_000, maxOutputTokens: 2_000_000, maxCostMicros: 1_000_000_000 };
export const OPS = ['files_read', 'files_list', 'grep_search', 'files_apply_patch', 'files_write', 'exec_run', 'agent_spawn', 'agent_status', 'agent_list'];

export const REPO = {
  'README.md': '# demo\n',
  'AGENTS.md': '# Agents\nAlways run the tests.\n',
  'CLAUDE.md': '# Claude\nKeep changes small.\n',
  'src/parser.js': 'export function parse(s) {\n  return s.split(",");\n}\n',
  'test.sh': '#!/bin/sh\ngrep -q "trim" src/parser.js && echo "tests passed" || { echo "tests failed"; exit 1; }\n',
};

export interface AgentEnv {
  host: GitHost;
  svc: Service;
  fake: FakeAgentProvider;
  mcp: Awaited<ReturnType<typeof connectV2>>;
  ws: string;
  cookie: string;
  csrf: string;
  credentialId: string;
  rest(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  tool(name: string, args: Record<string, unknown>): Promise<Awaited<ReturnType<typeof call>>>;
  ok(name: string, args: Record<string, unknown>): Promise<Record<string, any>>;
  waitFor(agentId: string, pred: (s: Record<string, any>) => boolean, ms?: number): Promise<Record<string, any>>;
  waitEnd(agentId: string, ms?: number): Promise<Record<string, any>>;
  logText(agentId: string): Promise<string>;
  makeProfile(id: string, apiMode: 'chat-completions' | 'responses', ops?: string[]): Promise<void>;
  dispose(): Promise<void>;
}

export async function startAgentEnv(opts: { args?: string[]; env?: Record<string, string>; dataDir?: string } = {}): Promise<AgentEnv> {
  const host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/agents', REPO)).url;
  const fake = await startFakeAgentProvider();
  const svc = await startWorkspaceService(host, { config: { providers: { provider_a: { baseUrl: fake.url + '/v1' } } }, args: opts.args, env: opts.env, dataDir: opts.dataDir });
  const { cookie, csrf } = await dashboardLogin(svc);
  const mcp = await connectV2(svc);
  const rest = async (method: string, path: string, body?: unknown) => {
    const h: Record<string, string> = { cookie, 'x-csrf-token': csrf };
    if (body !== undefined) h['content-type'] = 'application/json';
    const r = await httpRequest(svc.url, method, path, h, body === undefined ? undefined : JSON.stringify(body));
    return { status: r.status, body: JSON.parse(r.body || '{}') };
  };
  const cred = await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_a', key: PROVIDER_KEY, label: 'agents' });
  expect(cred.status).toBe(201);
  const credentialId = cred.body.credential.id as string;
  const tool = (name: string, args: Record<string, unknown>) => call(mcp, name, args);
  const ok = async (name: string, args: Record<string, unknown>) => {
    const r = await tool(name, args);
    if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
    return r.result as Record<string, any>;
  };
  const opened = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: `open-agents-${Date.now()}` });
  const ws = opened.workspaceId as string;
  const waitFor = async (agentId: string, pred: (s: Record<string, any>) => boolean, ms = 60_000) => {
    const until = Date.now() + ms;
    let last: Record<string, any> = {};
    while (Date.now() < until) {
      last = await ok('agent_status', { agentId });
      if (pred(last)) return last;
      await new Promise((r) => setTimeout(r, 150));
    }
    throw new Error(`agent ${agentId} did not reach the expected state: ${JSON.stringify(last).slice(0, 2000)}`);
  };
  const env: AgentEnv = {
    host,
    svc,
    fake,
    mcp,
    ws,
    cookie,
    csrf,
    credentialId,
    rest,
    tool,
    ok,
    waitFor,
    waitEnd: (agentId, ms) => waitFor(agentId, (s) => s.terminal === true, ms),
    async logText(agentId) {
      let cursor = '0';
      let text = '';
      for (let i = 0; i < 1000; i++) {
        const page = await ok('agent_logs', { agentId, cursor, limitBytes: 262144 });
        text += page.text;
        if (page.eof) break;
        cursor = page.nextCursor;
      }
      return text;
    },
    async makeProfile(id, apiMode, ops = OPS) {
      const c = await rest('POST', '/api/v1/agent-model-profiles', { profileId: id, displayName: id, credentialId, model: 'agent-model', apiMode, pricing: PRICING, limits: LIMITS, maxProxyOperations: ops, idempotencyKey: `make-profile-${id}` });
      expect(c.status, JSON.stringify(c.body)).toBe(201);
      const a = await rest('POST', `/api/v1/agent-model-profiles/${id}/activate`, { expectedGeneration: c.body.profile.generation });
      expect(a.status, JSON.stringify(a.body)).toBe(200);
    },
    async dispose() {
      await mcp.close().catch(() => undefined);
      await svc.dispose();
      await fake.close();
      await host.close();
    },
  };
  return env;
}

/**
 * Host processes running an agent runtime for an agent (none must be left). Idle pre-started
 * runtimes of the pool (docs/agents.md) run no agent and are listed by idleRuntimes() instead:
 * their socket directory is <dataDir>/run/agents/idle-<slot> until a job is assigned, when the
 * runner renames it after the agent.
 */
export function runtimeProcesses(): string[] {
  return allRuntimeProcesses().filter((l) => !isIdle(l));
}

/**
 * The agent runtimes still running once they should all have ended: an agent's status turns
 * terminal as its runtime is told to stop, and the process exits a moment later, so this waits
 * (up to `ms`) for them to go. A runtime that stays is still returned: a leak fails the test.
 */
export async function runtimesLeft(ms = 15_000): Promise<string[]> {
  const until = Date.now() + ms;
  let left = runtimeProcesses();
  while (left.length && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 200));
    left = runtimeProcesses();
  }
  return left;
}

/** Idle pre-started runtimes of the pool, as { pid, slot, line }. */
export function idleRuntimes(): Array<{ pid: number; slot: string; line: string }> {
  return allRuntimeProcesses()
    .map((line) => ({ line, pid: Number(line.trim().split(/\s+/)[0]), slot: idleSlot(line) }))
    .filter((r): r is { line: string; pid: number; slot: string } => r.slot !== null);
}

function allRuntimeProcesses(): string[] {
  try {
    return execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => /^\s*\d+ \/usr\/bin\/node .*\/opt\/agent\/dist\/agent\/runtime\.js/.test(l))
      .filter((l) => descendsFromThisTest(Number(l.trim().split(' ')[0])));
  } catch {
    return [];
  }
}

/**
 * The slot of an idle runtime: its sandbox is named agent-rt-<slot> (its cgroup says so), and the
 * slot is idle while the runner's control socket directory is still <dataDir>/run/agents/idle-<slot>
 * (/proc/net/unix keeps the path the socket was bound at; the directory is renamed once assigned).
 * The sandbox's own mountinfo names no host directory (docs/sandbox.md "Host paths").
 */
function idleSlot(line: string): string | null {
  try {
    const slot = /\/agent-rt-([0-9a-f]{16})$/m.exec(readFileSync(`/proc/${line.trim().split(/\s+/)[0]}/cgroup`, 'utf8'))?.[1];
    if (!slot) return null;
    const bound = readFileSync('/proc/net/unix', 'utf8')
      .split('\n')
      .map((l) => l.trim().split(/\s+/)[7])
      .find((p) => p?.endsWith(`/run/agents/idle-${slot}/control.sock`));
    return bound && existsSync(dirname(bound)) ? slot : null;
  } catch {
    return null;
  }
}

function isIdle(line: string): boolean {
  return idleSlot(line) !== null;
}

/** Whether a process descends from this test process (the services it started): other test files run beside it. */
function descendsFromThisTest(pid: number): boolean {
  for (let p = pid, hops = 0; p > 1 && hops < 64; hops++) {
    if (p === process.pid) return true;
    try {
      // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so read after the last ')'.
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      p = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      return false;
    }
  }
  return false;
}
