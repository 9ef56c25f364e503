/**
 * Wire contract between the runner's agent supervisor (src/services/agents/agents.ts) and the agent
 * runtime (src/agent/runtime.ts), which runs in its own sandbox and imports nothing of the runner.
 *
 * The runtime starts with nothing of any agent: it connects to the runner over a Unix socket
 * (CONTROL_SOCKET, newline-delimited JSON both ways), says `ready`, and gets its one job (the
 * start configuration, lease token included) as a `job` message; it reaches the gateway through a
 * second Unix socket (GATEWAY_SOCKET) that the runner relays only once the job is assigned. A
 * runtime runs one job and exits (pre-started pool: docs/agents.md).
 */

/** Inside the agent sandbox. */
export const AGENT_SOCKET_DIR = '/run/agent';
export const GATEWAY_SOCKET = `${AGENT_SOCKET_DIR}/gateway.sock`;
export const CONTROL_SOCKET = `${AGENT_SOCKET_DIR}/control.sock`;
/** `--socket-dir DIR` on the runtime's command line: where a driver put the two sockets instead (a Kubernetes Pod: under /dev/shm/atelier). */
export const SOCKET_DIR_ARG = '--socket-dir';

/** A tool as the MCP catalog publishes it. */
export interface AgentTool {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

export interface AgentStartConfig {
  agentId: string;
  apiMode: 'chat-completions' | 'responses';
  model: string;
  /** The agent's only credential: its gateway lease token. */
  leaseToken: string;
  prompt: string;
  /** Repository instruction files (repositoryContext), already formatted; empty for none. */
  context: string;
  tools: AgentTool[];
  /** Bytes of a tool result fed back to the model (head and tail kept). */
  toolResultCapBytes: number;
  /** Output tokens asked for per model turn (the gateway clamps it to the budget). */
  maxTurnOutputTokens: number;
  /** Budget figures at assignment (the first turn uses them instead of asking the runner). */
  budget?: BudgetView | null;
  /**
   * W3C traceparent of the agent's run span when the runner traces (docs/operations.md "Traces"):
   * each turn's model request carries its trace id with the turn's own span id, which the runtime
   * picks and reports in its `turn` event (`spanId`); absent when tracing is off.
   */
  traceparent?: string;
}

/** Budget figures sent to the model every turn. */
export interface BudgetView {
  inputTokens: { budget: number; used: number; reserved: number; remaining: number };
  outputTokens: { budget: number; used: number; reserved: number; remaining: number };
  costMicros: { budget: number; used: number; reserved: number; remaining: number };
  outputBytes: { budget: number; used: number; remaining: number };
  ttlSeconds: { budget: number; remaining: number };
}

/** Runtime to runner. */
export type RuntimeMessage =
  /** Loaded and idle, holding nothing of any agent; timing in ms since the process started. */
  | { t: 'ready'; timing?: { loadedMs: number; readyMs: number } }
  | { t: 'hello'; agentId: string }
  | { t: 'event'; event: Record<string, unknown> }
  | { t: 'call'; id: number; name: string; args: Record<string, unknown> }
  | { t: 'budget'; id: number }
  /** The model answered without tool calls: `steersSeen` lets the runner spot a steer still on its way. */
  | { t: 'final'; text: string; steersSeen: number }
  /** The runtime ends early (budget, stop request, error) with a summary. */
  | { t: 'ended'; status: 'LIMIT_EXCEEDED' | 'TIMED_OUT' | 'FAILED' | 'CANCELLED'; reason: string; summary: string };

/** Runner to runtime. */
export type RunnerMessage =
  /** The runtime's one job (sent once, after `ready`). */
  | { t: 'job'; config: AgentStartConfig }
  | { t: 'result'; id: number; result: { isError?: boolean; text: string } }
  | { t: 'budget'; id: number; budget: BudgetView }
  | { t: 'steer'; message: string }
  /** Reply to final: follow-ups to continue with (possibly none when a steer is on its way), or end. */
  | { t: 'continue'; messages: string[] }
  | { t: 'end' }
  /** Stop now with a summary: a budget of the runner's (ttl, output bytes) is running out. */
  | { t: 'stop'; status: 'LIMIT_EXCEEDED' | 'TIMED_OUT'; reason: string }
  | { t: 'cancel'; reason: string };
