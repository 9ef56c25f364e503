/**
 * The agent runtime: a program of its own, run by the runner in a short-lived sandbox of its own
 * (src/services/agents/agents.ts). It imports nothing of the runner: only node built-ins, the official
 * `openai` client and the wire contract (src/contracts/agent.ts).
 *
 * Ways out: two Unix sockets bound in by the runner. The gateway socket carries the model traffic
 * (the lease token is the runtime's only credential; a tiny in-sandbox bridge on 127.0.0.1 lets
 * the `openai` client reach it with its own HTTP stack); the control socket carries proxied tool
 * calls, events for the agent's log, budget figures, steer and follow-up messages and stops.
 *
 * The loop: speak the profile's API mode (Chat Completions or Responses, streaming), offer the
 * proxied tools with the catalog's schemas, run the model's tool calls through the runner, and
 * stop when the model answers without tool calls (SUCCEEDED with that answer, unless a follow-up
 * continues it). On a budget refusal from the gateway or a stop from the runner (TTL, output
 * bytes) it makes one last tool-less call for a summary, then ends. See docs/agents.md.
 */
import { splice } from '../contracts/splice.js';
import { connect, createServer, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import OpenAI from 'openai';
import {
  CONTROL_SOCKET,
  GATEWAY_SOCKET,
  SOCKET_DIR_ARG,
  type AgentStartConfig,
  type BudgetView,
  type RunnerMessage,
  type RuntimeMessage,
} from '../contracts/agent.js';

type EndStatus = 'LIMIT_EXCEEDED' | 'TIMED_OUT' | 'FAILED' | 'CANCELLED';
interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}
interface TurnResult {
  text: string;
  calls: ToolCall[];
}

class Stop extends Error {
  constructor(
    readonly status: EndStatus,
    readonly reason: string,
    readonly summarize: boolean,
  ) {
    super(reason);
  }
}

const SUMMARY_REQUEST =
  'Stop working now: a budget of yours has run out. In at most 150 words, summarise what you did, what changed in the workspace, and what is left to do. Do not call tools.';

/**
 * Pre-started runtimes (`--warm`) run one streaming request of each API mode against a stub on
 * 127.0.0.1 inside the sandbox before saying ready, so the `openai` client's and fetch's code is
 * loaded and compiled before a job arrives. No agent data and no credential is involved.
 */
async function warmUp(): Promise<void> {
  const chunk = { id: 'w', object: 'chat.completion.chunk', created: 0, model: 'w', choices: [{ index: 0, delta: { content: 'w' }, finish_reason: 'stop' }] };
  const done = { type: 'response.completed', sequence_number: 0, response: { id: 'w', object: 'response', output: [], usage: null } };
  const server = createHttpServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(req.url?.includes('/responses') ? `event: response.completed\ndata: ${JSON.stringify(done)}\n\n` : `data: ${JSON.stringify(chunk)}\n\ndata: [DONE]\n\n`);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as { port: number }).port;
  const client = new OpenAI({ apiKey: 'warm-up', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 10_000 });
  const tools = [{ type: 'function' as const, function: { name: 'w', description: 'w', parameters: { type: 'object', properties: {} } } }];
  try {
    for await (const _ of await client.chat.completions.create({ model: 'w', messages: [{ role: 'user', content: 'w' }], tools, stream: true, stream_options: { include_usage: true } })) void _;
    for await (const _ of await client.responses.create({ model: 'w', input: [{ role: 'user', content: 'w' }], stream: true, store: false })) void _;
  } catch {
    // A warm-up failure only costs speed.
  } finally {
    server.closeAllConnections();
    server.close();
  }
}

/** The two sockets: at AGENT_SOCKET_DIR, or where `--socket-dir` says (the executor's layout). */
const socketDirAt = process.argv.indexOf(SOCKET_DIR_ARG);
const SOCKET_DIR = socketDirAt > 0 && process.argv[socketDirAt + 1]?.startsWith('/') ? process.argv[socketDirAt + 1]! : undefined;
const GATEWAY_SOCKET_PATH = SOCKET_DIR ? `${SOCKET_DIR}/gateway.sock` : GATEWAY_SOCKET;
const CONTROL_SOCKET_PATH = SOCKET_DIR ? `${SOCKET_DIR}/control.sock` : CONTROL_SOCKET;

/** 127.0.0.1:<port> inside the sandbox, piped to the gateway socket. */
async function gatewayBridge(): Promise<number> {
  const server = createServer((client) => void splice(client, connect(GATEWAY_SOCKET_PATH)));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  server.unref();
  return (server.address() as { port: number }).port;
}

class Control {
  private buf = '';
  private nextId = 1;
  private readonly waiting = new Map<number, (m: RunnerMessage) => void>();
  private finalWaiter: ((m: RunnerMessage) => void) | null = null;
  private jobWaiter: ((c: AgentStartConfig | null) => void) | null = null;
  readonly steers: string[] = [];
  steersSeen = 0;
  stop: Stop | null = null;
  private stopListeners: Array<(s: Stop) => void> = [];

  constructor(private readonly sock: Socket) {
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => {
      this.buf += d;
      let nl: number;
      while ((nl = this.buf.indexOf('\n')) >= 0) {
        const line = this.buf.slice(0, nl);
        this.buf = this.buf.slice(nl + 1);
        if (line) this.onMessage(JSON.parse(line) as RunnerMessage);
      }
    });
    sock.on('close', () => this.requestStop(new Stop('FAILED', 'the runner closed the control channel', false)));
    sock.on('error', () => undefined);
  }

  private onMessage(m: RunnerMessage): void {
    switch (m.t) {
      case 'job': {
        const w = this.jobWaiter;
        this.jobWaiter = null; // one job per runtime: a second one is ignored
        w?.(m.config);
        return;
      }
      case 'result':
      case 'budget': {
        const w = this.waiting.get(m.id);
        this.waiting.delete(m.id);
        w?.(m);
        return;
      }
      case 'steer':
        this.steers.push(m.message);
        this.steersSeen++;
        return;
      case 'continue':
      case 'end': {
        const w = this.finalWaiter;
        this.finalWaiter = null;
        w?.(m);
        return;
      }
      case 'stop':
        return this.requestStop(new Stop(m.status, m.reason, true));
      case 'cancel':
        return this.requestStop(new Stop('CANCELLED', m.reason, false));
    }
  }

  requestStop(s: Stop): void {
    if (this.stop) return;
    this.stop = s;
    for (const l of this.stopListeners.splice(0)) l(s);
    for (const w of this.waiting.values()) w({ t: 'result', id: 0, result: { isError: true, text: 'stopped' } });
    this.waiting.clear();
    const fw = this.finalWaiter;
    this.finalWaiter = null;
    fw?.({ t: 'end' });
    const jw = this.jobWaiter;
    this.jobWaiter = null;
    jw?.(null);
  }

  /** Waits for the one job (null when the runner closes the channel or stops the runtime first). */
  job(): Promise<AgentStartConfig | null> {
    if (this.stop) return Promise.resolve(null);
    return new Promise((resolve) => (this.jobWaiter = resolve));
  }

  onStop(l: (s: Stop) => void): void {
    if (this.stop) l(this.stop);
    else this.stopListeners.push(l);
  }

  send(m: RuntimeMessage): void {
    if (!this.sock.destroyed) this.sock.write(JSON.stringify(m) + '\n');
  }

  event(e: Record<string, unknown>): void {
    this.send({ t: 'event', event: e });
  }

  private ask(m: { t: 'call'; name: string; args: Record<string, unknown> } | { t: 'budget' }): Promise<RunnerMessage> {
    if (this.stop) return Promise.reject(this.stop);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, (r) => (this.stop ? reject(this.stop) : resolve(r)));
      this.send({ ...m, id } as RuntimeMessage);
    });
  }

  async call(name: string, args: Record<string, unknown>): Promise<{ isError?: boolean; text: string }> {
    const r = await this.ask({ t: 'call', name, args });
    return r.t === 'result' ? r.result : { isError: true, text: 'no result' };
  }

  async budget(): Promise<BudgetView | null> {
    const r = await this.ask({ t: 'budget' });
    return r.t === 'budget' ? r.budget : null;
  }

  final(text: string): Promise<RunnerMessage> {
    return new Promise((resolve) => {
      this.finalWaiter = resolve;
      this.send({ t: 'final', text, steersSeen: this.steersSeen });
    });
  }
}

export function capText(text: string, cap: number): string {
  const b = Buffer.from(text, 'utf8');
  if (b.length <= cap) return text;
  const half = Math.floor(cap / 2);
  const head = b.subarray(0, half).toString('utf8').replace(/\uFFFD+$/, '');
  const tail = b.subarray(b.length - half).toString('utf8').replace(/^\uFFFD+/, '');
  return `${head}\n[... ${b.length - 2 * half} bytes cut from the middle of this tool result; ask for a narrower range ...]\n${tail}`;
}

function budgetLine(b: BudgetView | null): string {
  if (!b) return '';
  return (
    `Remaining budget: input tokens ${b.inputTokens.remaining} of ${b.inputTokens.budget}; output tokens ${b.outputTokens.remaining} of ${b.outputTokens.budget}; ` +
    `cost ${b.costMicros.remaining} of ${b.costMicros.budget} micro-USD; log bytes ${b.outputBytes.remaining} of ${b.outputBytes.budget}; time ${b.ttlSeconds.remaining} s of ${b.ttlSeconds.budget} s.`
  );
}

function isBudgetRefusal(e: unknown): string | null {
  if (e instanceof OpenAI.APIError && (e.status === 429 || e.status === 402)) {
    const code = (e.error as { code?: string } | undefined)?.code ?? e.code;
    if (code === 'budget_exceeded' || code === 'policy_exceeded') {
      const msg = (e.error as { message?: string } | undefined)?.message ?? e.message;
      const which = code === 'policy_exceeded' ? 'owner spend policy' : /input/i.test(msg) ? 'maxInputTokens' : /output/i.test(msg) ? 'maxOutputTokens' : 'maxCostMicros';
      return `${which}: ${code}: ${msg}`;
    }
  }
  return null;
}

async function main(): Promise<void> {
  const loadedMs = performance.now();
  if (process.argv.includes('--warm')) await warmUp();
  const port = await gatewayBridge();
  const sock = connect(CONTROL_SOCKET_PATH);
  await new Promise<void>((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', reject);
  });
  const ctl = new Control(sock);
  // Idle until the runner hands over the one job: nothing of any agent is held before this.
  ctl.send({ t: 'ready', timing: { loadedMs, readyMs: performance.now() } });
  const cfg = await ctl.job();
  if (!cfg) {
    sock.destroy();
    process.exit(0);
  }
  const jobAt = performance.now();
  ctl.send({ t: 'hello', agentId: cfg.agentId });
  const client = new OpenAI({ apiKey: cfg.leaseToken, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 600_000 });
  let turnAbort = new AbortController();
  let firstRequestMs: number | null = null;
  let firstTurnMs: number | null = null;
  ctl.onStop(() => turnAbort.abort());

  const system =
    'You are a coding subagent working in a remote workspace through the tools offered. Work step by step with the tools, then answer with a short final report (no tool calls) when the task is done.';
  const task = cfg.context ? `${cfg.prompt}\n\n<repository-instructions>\n${cfg.context}\n</repository-instructions>` : cfg.prompt;
  const actions: string[] = [];

  // The conversation, kept in the API mode's own shape.
  const chat = cfg.apiMode === 'chat-completions';
  const messages: Array<Record<string, unknown>> = [{ role: 'user', content: task }];
  const chatTools = cfg.tools.map((t) => ({ type: 'function' as const, function: { name: t.name, description: t.description, parameters: t.inputSchema } }));
  const respTools = cfg.tools.map((t) => ({ type: 'function' as const, name: t.name, description: t.description, parameters: t.inputSchema, strict: false }));

  // Trace context (docs/operations.md "Traces"): a turn's request names the turn's span, whose id
  // this runtime picks and reports in its turn event; other requests (the summary) the run's span.
  const trace = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(cfg.traceparent ?? '');
  let turnSpanId: string | null = null;
  const traceHeaders = (): Record<string, string> => (trace ? { traceparent: `00-${trace[1]}-${turnSpanId ?? trace[2]}-${trace[3]}` } : {});

  const turn = async (instructions: string, withTools: boolean, maxTokens: number, history = messages): Promise<TurnResult> => {
    turnAbort = new AbortController();
    if (ctl.stop) throw ctl.stop;
    const signal = turnAbort.signal;
    const headers = traceHeaders();
    let text = '';
    const calls: ToolCall[] = [];
    firstRequestMs ??= Math.round(performance.now() - jobAt);
    if (chat) {
      const stream = await client.chat.completions.create(
        {
          model: cfg.model,
          messages: [{ role: 'system', content: instructions }, ...history] as never,
          ...(withTools && chatTools.length ? { tools: chatTools } : {}),
          stream: true,
          stream_options: { include_usage: true },
          max_completion_tokens: maxTokens,
        },
        { signal, headers },
      );
      const byIndex = new Map<number, ToolCall>();
      for await (const chunk of stream) {
        const d = chunk.choices?.[0]?.delta;
        if (d?.content) text += d.content;
        for (const tc of d?.tool_calls ?? []) {
          const cur = byIndex.get(tc.index) ?? { id: '', name: '', arguments: '' };
          if (tc.id) cur.id = tc.id;
          if (tc.function?.name) cur.name += tc.function.name;
          if (tc.function?.arguments) cur.arguments += tc.function.arguments;
          byIndex.set(tc.index, cur);
        }
        if (chunk.usage) ctl.event({ type: 'usage', usage: chunk.usage });
      }
      calls.push(...[...byIndex.entries()].sort((a, b) => a[0] - b[0]).map(([, c]) => c));
      if (history === messages) {
        const msg: Record<string, unknown> = { role: 'assistant', content: text || null };
        if (calls.length) msg.tool_calls = calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
        messages.push(msg);
      }
    } else {
      const stream = await client.responses.create(
        {
          model: cfg.model,
          instructions,
          input: history as never,
          ...(withTools && respTools.length ? { tools: respTools } : {}),
          stream: true,
          store: false,
          max_output_tokens: maxTokens,
        },
        { signal, headers },
      );
      let output: Array<Record<string, unknown>> = [];
      for await (const ev of stream) {
        if (ev.type === 'response.output_text.delta') text += ev.delta;
        else if (ev.type === 'response.completed' || ev.type === 'response.incomplete') {
          output = (ev.response.output ?? []) as unknown as Array<Record<string, unknown>>;
          if (ev.response.usage) ctl.event({ type: 'usage', usage: ev.response.usage });
        } else if (ev.type === 'response.failed') throw new Error(`the model response failed: ${JSON.stringify(ev.response.error ?? {})}`);
      }
      for (const item of output) {
        if (item.type === 'function_call') calls.push({ id: String(item.call_id), name: String(item.name), arguments: String(item.arguments ?? '') });
      }
      if (!text) {
        for (const item of output) {
          if (item.type === 'message')
            for (const c of (item.content as Array<Record<string, unknown>>) ?? []) if (c.type === 'output_text') text += String(c.text ?? '');
        }
      }
      if (history === messages) {
        if (text) messages.push({ role: 'assistant', content: text });
        for (const c of calls) messages.push({ type: 'function_call', call_id: c.id, name: c.name, arguments: c.arguments });
      }
    }
    if (text) ctl.event({ type: 'model_text', text });
    if (firstTurnMs === null) {
      firstTurnMs = Math.round(performance.now() - jobAt);
      ctl.event({ type: 'timing', msFromJobToFirstRequest: firstRequestMs, msFromJobToFirstAnswer: firstTurnMs });
    }
    return { text, calls };
  };

  const toolOutput = (c: ToolCall, output: string) => {
    if (chat) messages.push({ role: 'tool', tool_call_id: c.id, content: output });
    else messages.push({ type: 'function_call_output', call_id: c.id, output });
  };

  const summarize = async (reason: string): Promise<string> => {
    // One last tool-less call with the whole conversation, then a compact one, then a local note.
    const instr = `${system}\n${SUMMARY_REQUEST}`;
    turnSpanId = null; // the summary request hangs from the run's span
    const compact = [{ role: 'user', content: `Task (shortened): ${cfg.prompt.slice(0, 2000)}\n\nActions taken so far:\n${actions.slice(-40).join('\n').slice(0, 4000)}\n\n${SUMMARY_REQUEST}` }];
    for (const history of [[...messages, { role: 'user', content: SUMMARY_REQUEST }], compact]) {
      try {
        const saved = ctl.stop;
        ctl.stop = null; // the summary call itself must not be refused by the stop that asked for it
        try {
          const r = await turn(instr, false, 400, history);
          if (r.text.trim()) {
            ctl.event({ type: 'summary', text: r.text });
            return r.text;
          }
        } finally {
          ctl.stop = saved;
        }
      } catch (e) {
        ctl.event({ type: 'summary_call_failed', error: isBudgetRefusal(e) ?? (e as Error).message });
      }
    }
    const local = `No model summary could be made (${reason}). Actions taken: ${actions.slice(-20).join('; ') || 'none'}.`;
    ctl.event({ type: 'summary', text: local, source: 'runtime' });
    return local;
  };

  const end = async (status: EndStatus, reason: string, summarizeFirst: boolean): Promise<void> => {
    const summary = summarizeFirst ? await summarize(reason) : '';
    ctl.send({ t: 'ended', status, reason, summary });
  };

  let turnNo = 0;
  try {
    for (;;) {
      if (ctl.stop) throw ctl.stop;
      // The first turn uses the figures sent with the job (the lease was just issued).
      const budget = turnNo === 0 && cfg.budget ? cfg.budget : await ctl.budget();
      // Keep enough output tokens for the summary: with fewer than this left, summarise now.
      if (budget && budget.outputTokens.remaining < 64) throw new Stop('LIMIT_EXCEEDED', `maxOutputTokens: ${budget.outputTokens.remaining} output tokens left`, true);
      if (budget && budget.inputTokens.remaining < 1024) throw new Stop('LIMIT_EXCEEDED', `maxInputTokens: ${budget.inputTokens.remaining} input tokens left`, true);
      const instructions = `${system}\n${budgetLine(budget)}`;
      turnSpanId = trace ? randomBytes(8).toString('hex') : null;
      ctl.event({ type: 'turn', turn: ++turnNo, budget, ...(turnSpanId ? { spanId: turnSpanId } : {}) });
      let r: TurnResult;
      try {
        r = await turn(instructions, true, cfg.maxTurnOutputTokens);
      } catch (e) {
        const refusal = isBudgetRefusal(e);
        if (refusal) throw new Stop('LIMIT_EXCEEDED', refusal, true);
        if (ctl.stop) throw ctl.stop;
        throw e;
      }
      if (r.calls.length === 0) {
        if (ctl.steers.length) {
          // A steer arrived while the model was answering: continue with it instead of ending.
          for (const s of ctl.steers.splice(0)) messages.push({ role: 'user', content: `[steer from the user] ${s}` });
          ctl.event({ type: 'steer_applied' });
          continue;
        }
        const reply = await ctl.final(r.text);
        if (ctl.stop) throw ctl.stop;
        if (reply.t === 'end') return;
        if (reply.t === 'continue') {
          for (const s of ctl.steers.splice(0)) messages.push({ role: 'user', content: `[steer from the user] ${s}` });
          for (const m of reply.messages) messages.push({ role: 'user', content: `[follow-up from the user] ${m}` });
        }
        continue;
      }
      for (const c of r.calls) {
        if (ctl.stop) throw ctl.stop;
        if (ctl.steers.length) {
          toolOutput(c, 'skipped by steer: the user redirected the work before this call ran');
          ctl.event({ type: 'tool_skipped', name: c.name, reason: 'steer' });
          continue;
        }
        let args: Record<string, unknown>;
        try {
          const parsed = c.arguments.trim() ? JSON.parse(c.arguments) : {};
          if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('arguments must be a JSON object');
          args = parsed as Record<string, unknown>;
        } catch (e) {
          toolOutput(c, JSON.stringify({ error: { code: 'INVALID_ARGUMENT', message: `tool arguments are not a JSON object: ${(e as Error).message}` } }));
          continue;
        }
        actions.push(`${c.name} ${c.arguments.slice(0, 200)}`);
        const res = await ctl.call(c.name, args);
        toolOutput(c, capText(res.text, cfg.toolResultCapBytes));
      }
      if (ctl.steers.length) {
        for (const s of ctl.steers.splice(0)) messages.push({ role: 'user', content: `[steer from the user] ${s}` });
        ctl.event({ type: 'steer_applied' });
      }
    }
  } catch (e) {
    if (e instanceof Stop) await end(e.status, e.reason, e.summarize);
    else await end('FAILED', `the agent runtime failed: ${(e as Error).message}`, false);
  } finally {
    await new Promise<void>((r) => sock.end(() => r()));
    setTimeout(() => process.exit(0), 200).unref();
  }
}

main().catch((e) => {
  process.stderr.write(`agent runtime: ${(e as Error).message}\n`);
  process.exit(1);
});
