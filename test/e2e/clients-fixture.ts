/**
 * What the third-party client tests share (test/e2e/clients-*.test.ts, docs/clients.md): where the
 * clients are installed (test/clients/, a project of its own installed by scripts/setup.sh), a way
 * to run one in its own process group with an isolated home and end it for sure, and loopback fakes
 * of the two model APIs the clients talk to (the Gemini API and OpenAI's chat completions), which
 * record what the client sends the model — its tool declarations — and answer, in the real wire
 * format, with one call of a named tool and then with text. No model is called and nothing leaves
 * the machine.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { existsSync, mkdtempSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ROOT, type Service } from './harness.js';

export const CLIENTS_DIR = join(ROOT, 'test/clients');
const modules = join(CLIENTS_DIR, 'node_modules');
export const GEMINI_BIN = join(modules, '@google/gemini-cli/bundle/gemini.js');
export const OPENCODE_BIN = join(modules, `opencode-linux-${process.arch}/bin/opencode`);
export const MCP_REMOTE_BIN = join(modules, 'mcp-remote/dist/proxy.js');

/** Fails with the fix when test/clients is not installed (scripts/setup.sh installs it). */
export function requireInstalled(...paths: string[]): void {
  for (const p of paths) {
    if (!existsSync(p)) throw new Error(`${p} is missing: run scripts/setup.sh (it runs npm ci --prefix test/clients)`);
  }
}

export interface ToolDecl {
  name: string;
  description?: string;
  schema: unknown;
}

/** What the official client (SDK v1) lists for a token and extra headers: the reference the clients are compared with. */
export async function listedTools(svc: Service, headers: Record<string, string> = {}): Promise<ToolDecl[]> {
  const c = new ClientV1({ name: 'atelier-e2e-reference', version: '1.0.0' });
  await c.connect(new TransportV1(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${svc.token}`, ...headers } } }));
  try {
    const tools: ToolDecl[] = [];
    let cursor: string | undefined;
    do {
      const r = await c.listTools(cursor ? { cursor } : {});
      tools.push(...r.tools.map((t) => ({ name: t.name, description: t.description, schema: t.inputSchema })));
      cursor = r.nextCursor;
    } while (cursor);
    return tools;
  } finally {
    await c.close();
  }
}

/**
 * A client test's bound: one client command costs 3 to 10 s of CPU (opencode's binary, the CLI's
 * bundle), and the suite runs two files at once on two cores; this only bounds a hung client.
 */
export const CLIENT_TEST_MS = 300_000;

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Client processes still running: `endAll` ends them (and their children) when a test fails midway. */
const running = new Set<ChildProcess>();

/**
 * Runs a client command to its end in a process group of its own, stdin closed. `limitMs` only
 * bounds a hung client: past it the whole group is killed and the run fails with what it printed.
 */
export function runClient(cmd: string, args: string[], opts: { env: Record<string, string>; cwd: string; limitMs?: number }): Promise<Run> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    running.add(p);
    let stdout = '';
    let stderr = '';
    p.stdout!.on('data', (d) => (stdout += d));
    p.stderr!.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      killGroup(p);
      reject(new Error(`${cmd} ${args.join(' ')} did not end in ${opts.limitMs ?? 180_000} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    }, opts.limitMs ?? 180_000);
    p.once('error', reject);
    p.once('close', (code) => {
      clearTimeout(timer);
      running.delete(p);
      // A client may leave a child behind (an MCP connection's helper): the group goes with it.
      killGroup(p);
      resolve({ code, stdout, stderr });
    });
  });
}

function killGroup(p: ChildProcess): void {
  try {
    process.kill(-p.pid!, 'SIGKILL');
  } catch {
    // already gone
  }
}

export async function endAll(): Promise<void> {
  const left = [...running];
  for (const p of left) killGroup(p);
  await Promise.all(left.map((p) => new Promise((r) => (p.exitCode !== null || p.signalCode !== null ? r(undefined) : p.once('close', r)))));
}

/** A fresh directory for one client's home, config and project (under the run's TMPDIR). */
export function clientHome(name: string): string {
  return mkdtempSync(join(tmpdir(), `atelier-client-${name}-`));
}

/** The environment a client runs with: the machine's PATH and nothing of the user's own home or config. */
export function isolatedEnv(home: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: home,
    TMPDIR: process.env.TMPDIR ?? tmpdir(),
    LANG: 'C.UTF-8',
    TERM: 'dumb',
    NO_COLOR: '1',
    CI: '1',
    ...extra,
  };
}

export interface ModelRequest {
  path: string;
  body: Record<string, unknown>;
}

export interface FakeModel {
  url: string;
  requests: ModelRequest[];
  /** The arguments of the tool call the fake makes (default none); a test may change them. */
  callArgs: Record<string, unknown>;
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  let body = '';
  for await (const d of req) body += d;
  return body ? (JSON.parse(body) as Record<string, unknown>) : {};
}

async function listen(server: Server, requests: ModelRequest[], model: { callArgs: Record<string, unknown> }): Promise<FakeModel> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return Object.assign(model, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  });
}

/**
 * The Gemini API (`models/*:generateContent`, `:streamGenerateContent?alt=sse`, `:countTokens`) as
 * far as a client turn needs it. A request that declares `callTool` and has no function response yet
 * gets a functionCall of it (with `callArgs`); any other request gets the text "done".
 */
export function fakeGeminiApi(callTool: string): Promise<FakeModel> {
  const requests: ModelRequest[] = [];
  const model = { callArgs: {} as Record<string, unknown> };
  const server = createServer((req, res) => {
    void readBody(req).then((body) => {
      requests.push({ path: req.url ?? '', body });
      if ((req.url ?? '').includes(':countTokens')) {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ totalTokens: 1 }));
        return;
      }
      const declared = ((body.tools as Array<{ functionDeclarations?: Array<{ name: string }> }> | undefined) ?? []).flatMap((t) => t.functionDeclarations ?? []).some((d) => d.name === callTool);
      const answered = JSON.stringify(body.contents ?? []).includes('"functionResponse"');
      const part = declared && !answered ? { functionCall: { name: callTool, args: model.callArgs } } : { text: 'done' };
      const chunk = {
        candidates: [{ content: { role: 'model', parts: [part] }, finishReason: 'STOP', index: 0 }],
        usageMetadata: { promptTokenCount: 1, candidatesTokenCount: 1, totalTokenCount: 2 },
      };
      if ((req.url ?? '').includes('alt=sse')) res.writeHead(200, { 'content-type': 'text/event-stream' }).end(`data: ${JSON.stringify(chunk)}\r\n\r\n`);
      else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(chunk));
    });
  });
  return listen(server, requests, model);
}

/**
 * OpenAI's chat completions (streamed), as an OpenAI-compatible provider serves them. A request
 * that declares `callTool` and has no tool message yet gets one call of it (with `callArgs`); any
 * other request gets the text "done".
 */
export function fakeChatCompletions(callTool: string): Promise<FakeModel> {
  const requests: ModelRequest[] = [];
  const model = { callArgs: {} as Record<string, unknown> };
  let n = 0;
  const server = createServer((req, res) => {
    void readBody(req).then((body) => {
      requests.push({ path: req.url ?? '', body });
      const declared = ((body.tools as Array<{ function: { name: string } }> | undefined) ?? []).some((t) => t.function.name === callTool);
      const answered = ((body.messages as Array<{ role: string }> | undefined) ?? []).some((m) => m.role === 'tool');
      const base = { id: `chatcmpl-${++n}`, object: 'chat.completion.chunk', created: 1, model: String(body.model ?? 'fake') };
      const chunks =
        declared && !answered
          ? [
              { index: 0, delta: { role: 'assistant', tool_calls: [{ index: 0, id: `call_${n}`, type: 'function', function: { name: callTool, arguments: JSON.stringify(model.callArgs) } }] }, finish_reason: null },
              { index: 0, delta: {}, finish_reason: 'tool_calls' },
            ]
          : [
              { index: 0, delta: { role: 'assistant', content: 'done' }, finish_reason: null },
              { index: 0, delta: {}, finish_reason: 'stop' },
            ];
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      chunks.forEach((c, i) => res.write(`data: ${JSON.stringify({ ...base, choices: [c], ...(i === chunks.length - 1 ? { usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } } : {}) })}\n\n`));
      res.end('data: [DONE]\n\n');
    });
  });
  return listen(server, requests, model);
}
