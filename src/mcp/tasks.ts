/**
 * Long calls as MCP tasks (issue #32 item 2; docs/mcp-tasks.md). Two forms are served, each to the
 * clients that negotiate it:
 *
 * - 2026-07-28: the Tasks extension (io.modelcontextprotocol/tasks, SEP-2663). A tools/call of one
 *   of TASK_TOOLS whose per-request client capabilities declare the extension answers a
 *   CreateTaskResult (resultType "task"); tasks/get, tasks/update and tasks/cancel follow it.
 * - 2025-11-25: the experimental tasks of that revision. The server declares capabilities.tasks and
 *   execution.taskSupport "optional" on TASK_TOOLS; a tools/call with params.task answers
 *   CreateTaskResult ({task}); tasks/get, tasks/result, tasks/list and tasks/cancel follow it.
 *
 * A task is an operation (services/commands: the operations table, the same record exec_run and
 * bash with async make): its id is the operation's id (144 random bits), operation_status,
 * operation_wait and operation_cancel see it too, and a runner restart interrupts it as it
 * interrupts every operation (the task then fails, with its output so far kept). The call runs
 * once through the registry's pipeline, with the caller's own grant, audit and idempotency; the
 * task carries its result. Every tasks/* request is checked against the principal that started the
 * task and the grant it calls with now: any other caller is told the task does not exist.
 */
import { randomUUID } from 'node:crypto';
import { ProtocolError, ProtocolErrorCode, Server, type CallToolResult, type JSONRPCRequest, type Result, type ServerContext } from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { App } from '../app.js';
import type { CallRecord, CallOutcome, CallHandle } from '../services/commands/index.js';
import { mayReachOperation, type OperationViewer } from '../services/commands/index.js';
import type { Access } from '../core/toolsets.js';
import { requireAccess, type ToolRegistry } from './registry.js';
import type { ApprovalAsk, AskAnswer, InCallApprovals } from './in-call-approvals.js';

export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
export const RELATED_TASK_META = 'io.modelcontextprotocol/related-task';

/** The calls that can take long (issue #32 item 2): only these become tasks. */
export const TASK_TOOLS: ReadonlySet<string> = new Set([
  'workspace_open',
  'exec_run',
  'bash',
  'tasks_run',
  'agent_spawn',
  'packages_apply',
  'git_fetch',
  'git_pull',
  'git_push',
  'workspace_finalize',
  'deployments_run',
  'skills_run',
  'hooks_run',
]);

/** What the server declares: the 2025-11-25 tasks capability, and the 2026-07-28 extension (each era's codec keeps its own). */
export const TASK_CAPABILITIES = {
  tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } },
  extensions: { [TASKS_EXTENSION]: {} },
};

/** tools/list with execution.taskSupport on TASK_TOOLS, for 2025-era clients (the 2026-07-28 codec drops the field). */
export function withTaskSupport<T extends { name: string }>(tools: T[]): Array<T | (T & { execution: { taskSupport: 'optional' } })> {
  return tools.map((t) => (TASK_TOOLS.has(t.name) ? { ...t, execution: { taskSupport: 'optional' as const } } : t));
}

/** How long a task and its result are kept after it was created (the Task's ttlMs); a task still running then is kept until it ends. */
export const TASK_TTL_MS = 24 * 60 * 60 * 1000;
/** The polling interval a task suggests. */
export const TASK_POLL_MS = 1000;

/** Who calls, as the auth gate of /mcp tells it (src/mcp/http.ts). */
export interface TaskCaller {
  principal: string;
  access: Access;
  logKey: string;
}

/** The params of a task-augmented tools/call. */
export interface TaskCallParams {
  name: string;
  arguments?: Record<string, unknown>;
}

/** What a task runs: the tool call through the registry, as http.ts runs any call, with the task's signal, log and status. */
export type TaskRunner = (
  params: TaskCallParams,
  c: { caller: TaskCaller; signal: AbortSignal; output: (chunk: Buffer) => void; status: (message: string) => void; approvals?: InCallApprovals },
) => Promise<CallToolResult>;

type Era = 'modern' | 'legacy';

/** The per-request envelope of a 2026-07-28 request (absent on 2025-era requests). */
function envelopeOf(ctx: Pick<ServerContext, 'mcpReq'>): Record<string, unknown> | undefined {
  return ctx.mcpReq.envelope as Record<string, unknown> | undefined;
}

/** The client capabilities a 2026-07-28 request declares (its envelope). */
export function requestCapabilities(ctx: Pick<ServerContext, 'mcpReq'>): Record<string, unknown> | undefined {
  const caps = envelopeOf(ctx)?.['io.modelcontextprotocol/clientCapabilities'];
  return caps !== null && typeof caps === 'object' ? (caps as Record<string, unknown>) : undefined;
}

/** Whether the request is of the 2026-07-28 era (it carries the envelope). */
export function isModern(ctx: Pick<ServerContext, 'mcpReq'>): boolean {
  return envelopeOf(ctx)?.['io.modelcontextprotocol/protocolVersion'] !== undefined;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Whether capabilities declare the Tasks extension. */
export function declaresTasks(caps: Record<string, unknown> | undefined): boolean {
  return isObject(caps?.extensions) && isObject((caps.extensions as Record<string, unknown>)[TASKS_EXTENSION]);
}

/** Whether capabilities declare URL-mode elicitation. */
export function declaresUrlElicitation(caps: Record<string, unknown> | undefined): boolean {
  return isObject(caps?.elicitation) && isObject((caps.elicitation as Record<string, unknown>).url);
}

/** The Tasks extension's "missing required client capability" error (-32021). */
function missingTasksCapability(): ProtocolError {
  return new ProtocolError(-32021 as ProtocolErrorCode, 'Missing required client capability', { requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } });
}

function notFound(taskId: string): ProtocolError {
  return new ProtocolError(ProtocolErrorCode.InvalidParams, `Failed to retrieve task: Task not found (${taskId.slice(0, 100)}): it does not exist, has expired, or belongs to another caller`);
}

/** The tool result marked as a task's creation, so the Server's tools/call wrapper lets it through unvalidated (TaskServer). */
class TaskCreated extends Error {
  constructor(readonly result: Record<string, unknown>) {
    super('task created');
  }
}

/**
 * The per-request Server, whose tools/call may answer a CreateTaskResult: the SDK's tools/call
 * wrapper validates every result as a CallToolResult (and would give a task result an empty
 * `content`), so a task's creation passes around it. Every other result is validated as before.
 */
export class TaskServer extends Server {
  protected override _wrapHandler(
    method: string,
    handler: (request: JSONRPCRequest, ctx: ServerContext) => Promise<Result>,
  ): (request: JSONRPCRequest, ctx: ServerContext) => Promise<Result> {
    if (method !== 'tools/call') return super._wrapHandler(method, handler);
    const wrapped = super._wrapHandler(method, async (request, ctx) => {
      const result = await handler(request, ctx);
      if ((result as unknown) instanceof TaskCreated) throw result;
      return result;
    });
    return async (request, ctx) => {
      try {
        return await wrapped(request, ctx);
      } catch (e) {
        if (e instanceof TaskCreated) return e.result as Result;
        throw e;
      }
    };
  }
}

/** A task's status as both eras name it. */
type TaskStatus = 'working' | 'input_required' | 'completed' | 'failed' | 'cancelled';

/** A client's answer waiting to reach a task's call (tasks/update; or a 2025-11-25 tasks/result stream). */
interface Waiter {
  key: string;
  resolve: (answer: AskAnswer) => void;
  /** The input request, as the client is asked it. */
  request: { method: string; params: Record<string, unknown> };
  /** A 2025-11-25 tasks/result stream is asking it now (so another does not ask twice). */
  asking?: boolean;
}

/** Asks the client something on a 2025-11-25 tasks/result stream (its session declared URL elicitation); resolves with its result. */
export type TaskInputAsk = (method: string, params: Record<string, unknown>, signal: AbortSignal) => Promise<Record<string, unknown>>;

export class McpTasks {
  private readonly waiters = new Map<string, Waiter>();
  /** tasks/result streams waiting for a task's next input request (2025-11-25). */
  private readonly inputWatchers = new Map<string, Set<() => void>>();

  constructor(
    private readonly app: App,
    private readonly registry: ToolRegistry,
    private readonly run: TaskRunner,
  ) {}

  /**
   * Whether this tools/call becomes a task: one of TASK_TOOLS, from a client that negotiated tasks on
   * this request, whose grant lets it call the tool (a call its grant refuses is answered at once by
   * the pipeline, with the refusal the call itself gets, audited as such).
   */
  wanted(params: { name: string; task?: unknown }, ctx: Pick<ServerContext, 'mcpReq'>, caller: TaskCaller): Era | null {
    if (!TASK_TOOLS.has(params.name)) return null;
    try {
      requireAccess(this.registry.grant({ access: caller.access, actor: 'mcp' }), this.registry.get(params.name)!);
    } catch {
      return null;
    }
    if (isModern(ctx)) return declaresTasks(requestCapabilities(ctx)) ? 'modern' : null;
    return isObject(params.task) ? 'legacy' : null;
  }

  /**
   * Starts the call as a task and returns its CreateTaskResult: the operation exists before this
   * returns. A call with an idempotencyKey (tools that take one) that was started as a task before,
   * with the same input, by the same caller, answers that task again; different input is CONFLICT,
   * as for the call itself.
   */
  async start(params: TaskCallParams, caller: TaskCaller, era: Era, approvals: ((task: CallHandle) => InCallApprovals) | undefined): Promise<TaskCreated> {
    const def = this.registry.get(params.name)!;
    const args = params.arguments ?? {};
    const key = def.idempotency === 'key' && typeof args.idempotencyKey === 'string' ? args.idempotencyKey : undefined;
    const create = (): CallRecord => {
      const workspaceId = typeof args.workspaceId === 'string' ? args.workspaceId : def.workspace ? (this.app.principals.activeWorkspace(caller.principal) ?? null) : null;
      const command = (params.name === 'exec_run' || params.name === 'bash') && typeof args.command === 'string' ? args.command : params.name;
      return this.app.commands.startCall({
        tool: params.name,
        workspaceId,
        command,
        principal: caller.principal,
        binding: JSON.stringify({ access: caller.access }),
        ttlMs: TASK_TTL_MS,
        run: async (h): Promise<CallOutcome> => {
          const result = await this.run(params, { caller, signal: h.signal, output: h.output, status: h.status, approvals: approvals?.(h) });
          return { result: result as unknown as Record<string, unknown>, isError: result.isError === true };
        },
      });
    };
    let record: CallRecord;
    if (key === undefined) record = create();
    else {
      const scope = `mcp-task:${params.name}`;
      // The same key and input from the same caller is the same task; the pipeline's own key check runs inside it.
      const input = { principal: caller.principal, arguments: args };
      record = await this.app.locks.idempotencyKey(`${scope}\u0000${key}`, async () => {
        const earlier = this.app.idempotency.lookup(scope, key, input);
        const known = earlier && typeof earlier.result.taskId === 'string' ? this.app.commands.call(earlier.result.taskId) : null;
        if (known) return known;
        const made = create();
        this.app.idempotency.save(scope, key, input, { taskId: made.id }, false, TASK_TTL_MS);
        return made;
      });
    }
    const view = this.view(record, era);
    return new TaskCreated(era === 'modern' ? { ...view, resultType: 'task' } : { task: view });
  }

  /** The task `taskId` as this caller may see it: started by the same principal, and its tool still within the caller's grant. */
  private owned(taskId: unknown, caller: TaskCaller): CallRecord {
    if (typeof taskId !== 'string' || taskId.length > 200) throw new ProtocolError(ProtocolErrorCode.InvalidParams, 'taskId: must be a string of at most 200 characters');
    const record = this.app.commands.call(taskId);
    // The rule operation_status, operation_wait and operation_cancel apply too (services/commands/access.ts).
    if (!record || !mayReachOperation(record, this.viewer(caller))) throw notFound(taskId);
    return record;
  }

  /** The caller as the operations' rule sees it: its principal and its grant on this request. */
  private viewer(caller: TaskCaller): OperationViewer {
    return { principal: caller.principal, grant: this.registry.grant({ access: caller.access, actor: 'mcp' }) };
  }

  /** Requires the Tasks extension on a 2026-07-28 request (the extension's -32021 otherwise); a 2025-era request needs nothing. */
  private checkNegotiated(ctx: Pick<ServerContext, 'mcpReq'>): Era {
    if (!isModern(ctx)) return 'legacy';
    if (!declaresTasks(requestCapabilities(ctx))) throw missingTasksCapability();
    return 'modern';
  }

  /** tasks/get (both eras). */
  get(params: { taskId?: unknown }, caller: TaskCaller, ctx: Pick<ServerContext, 'mcpReq'>): Record<string, unknown> {
    const era = this.checkNegotiated(ctx);
    return this.view(this.owned(params.taskId, caller), era);
  }

  /** tasks/update (2026-07-28): the client's answers to the task's input requests; keys not outstanding are ignored. */
  update(params: { taskId?: unknown }, caller: TaskCaller, ctx: Pick<ServerContext, 'mcpReq'>): Record<string, never> {
    this.checkNegotiated(ctx);
    const record = this.owned(params.taskId, caller);
    const responses = ctx.mcpReq.inputResponses ?? {};
    const waiter = this.waiters.get(record.id);
    if (waiter && isObject(responses[waiter.key])) {
      const action = (responses[waiter.key] as Record<string, unknown>).action;
      waiter.resolve(action === 'accept' || action === 'decline' ? action : 'cancel');
    }
    return {};
  }

  /** tasks/cancel (both eras): asks the call to stop (cooperative; its effects so far stay). 2025-11-25 answers the task, and refuses a task already ended. */
  async cancel(params: { taskId?: unknown }, caller: TaskCaller, ctx: Pick<ServerContext, 'mcpReq'>): Promise<Record<string, unknown>> {
    const era = this.checkNegotiated(ctx);
    const record = this.owned(params.taskId, caller);
    const running = this.app.commands.cancelCall(record.id);
    this.waiters.get(record.id)?.resolve('cancel');
    if (era === 'modern') return {};
    if (!running) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Cannot cancel task: it is already ${this.status(record)}`);
    await this.app.commands.callEnded(record.id);
    return this.view(this.app.commands.call(record.id)!, era);
  }

  /**
   * tasks/result (2025-11-25): waits until the task ends, then answers exactly what the call
   * answered (or its error). While it waits, an input request of the task (an owner approval to
   * open) is sent to the client on this request's stream when its session declared URL-mode
   * elicitation (`ask`), with the related-task `_meta`, and the client's answer goes to the call:
   * the 2025-11-25 way of giving a task its input.
   */
  async result(params: { taskId?: unknown }, caller: TaskCaller, signal: AbortSignal, ask?: TaskInputAsk): Promise<Record<string, unknown>> {
    let record = this.owned(params.taskId, caller);
    const meta = { [RELATED_TASK_META]: { taskId: record.id } };
    for (;;) {
      const waiter = ask ? this.waiters.get(record.id) : undefined;
      if (ask && waiter && !waiter.asking) {
        waiter.asking = true;
        let answer: AskAnswer = 'cancel';
        try {
          const r = await ask(waiter.request.method, { ...waiter.request.params, _meta: meta }, signal);
          answer = r.action === 'accept' || r.action === 'decline' ? r.action : 'cancel';
        } catch {
          // This stream went away (another tasks/result may ask again), or the client failed the request.
          if (signal.aborted) {
            waiter.asking = false;
            break;
          }
        }
        if (this.waiters.get(record.id) === waiter) waiter.resolve(answer);
        continue;
      }
      if (!ask) {
        await this.app.commands.callEnded(record.id, signal);
        break;
      }
      // Until the task ends, or turns input_required (approvalsFor kicks the watchers).
      let kick: () => void = () => undefined;
      const kicked = new Promise<'input'>((resolve) => (kick = () => resolve('input')));
      const watchers = this.inputWatchers.get(record.id) ?? new Set<() => void>();
      watchers.add(kick);
      this.inputWatchers.set(record.id, watchers);
      try {
        const why = await Promise.race([this.app.commands.callEnded(record.id, signal).then(() => 'ended' as const), kicked]);
        if (why === 'ended') break;
      } finally {
        watchers.delete(kick);
        if (watchers.size === 0) this.inputWatchers.delete(record.id);
      }
    }
    record = this.app.commands.call(record.id) ?? record;
    const status = this.status(record);
    if (status === 'completed') return { ...record.result!, _meta: { ...(record.result!._meta as Record<string, unknown> | undefined), ...meta } };
    if (status === 'working' || status === 'input_required') throw new ProtocolError(ProtocolErrorCode.InternalError, `task ${record.id} has not ended (the request was cancelled while waiting)`);
    const error = this.errorOf(record);
    throw new ProtocolError(error.code as ProtocolErrorCode, error.message, error.data);
  }

  /** tasks/list (2025-11-25): this principal's tasks only, oldest first. */
  list(params: { cursor?: unknown }, caller: TaskCaller): Record<string, unknown> {
    const cursor = typeof params.cursor === 'string' ? params.cursor : undefined;
    let page: ReturnType<App['commands']['listCalls']>;
    try {
      page = this.app.commands.listCalls(caller.principal, cursor, 100);
    } catch {
      throw new ProtocolError(ProtocolErrorCode.InvalidParams, 'cursor: not a cursor tasks/list issued');
    }
    const viewer = this.viewer(caller);
    return { tasks: page.calls.filter((c) => mayReachOperation(c, viewer)).map((c) => this.view(c, 'legacy')), ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) };
  }

  /**
   * What a task's call uses to open an owner approval in the client (clients that declared URL
   * elicitation): the task turns input_required with the approval's URL as its input request; on
   * 2026-07-28 tasks/update carries the answer, on 2025-11-25 the client's tasks/result stream asks
   * it (result() above).
   */
  approvalsFor(origin: string): (task: CallHandle) => InCallApprovals {
    return (task) => ({
      origin,
      ask: (ask: ApprovalAsk, signal: AbortSignal) =>
        new Promise<AskAnswer>((resolve) => {
          const key = `approval-${ask.approvalId}`;
          const done = (answer: AskAnswer) => {
            if (this.waiters.get(task.id)?.key === key) this.waiters.delete(task.id);
            signal.removeEventListener('abort', onAbort);
            task.input(null);
            task.status(answer === 'accept' ? `the client opened approval request ${ask.approvalId}: waiting for the owner's decision` : `the client did not open approval request ${ask.approvalId}`);
            resolve(answer);
          };
          const onAbort = () => done('cancel');
          const request = { method: 'elicitation/create', params: { mode: 'url', message: ask.message, url: ask.url, elicitationId: randomUUID() } };
          this.waiters.set(task.id, { key, resolve: done, request });
          task.input({ [key]: request });
          for (const kick of this.inputWatchers.get(task.id) ?? []) kick();
          task.status(`waiting for the owner's approval of request ${ask.approvalId} (open ${ask.url})`);
          if (signal.aborted) onAbort();
          else signal.addEventListener('abort', onAbort, { once: true });
        }),
    });
  }

  private status(record: CallRecord): TaskStatus {
    if (record.state === 'running') return record.input ? 'input_required' : 'working';
    if (record.state === 'cancelled') return 'cancelled';
    return record.result ? 'completed' : 'failed';
  }

  /** The protocol error of a failed task: the call's own, or the restart or shutdown that interrupted it. */
  private errorOf(record: CallRecord): { code: number; message: string; data?: unknown } {
    if (record.error) return record.error;
    if (record.state === 'cancelled') return { code: ProtocolErrorCode.InternalError, message: `task ${record.id} was cancelled` };
    return {
      code: ProtocolErrorCode.InternalError,
      message: `${record.reason ?? `the call ended ${record.state}`}: the call of ${record.tool} did not finish and has no result; its output so far: operation_status ${record.id}`,
      data: { operationId: record.id, state: record.state },
    };
  }

  /** A task as tasks/get answers it: the 2026-07-28 DetailedTask, or the 2025-11-25 Task. */
  private view(record: CallRecord, era: Era): Record<string, unknown> {
    const status = this.status(record);
    const isError = record.result?.isError === true;
    const statusMessage =
      status === 'working'
        ? (record.statusMessage ?? `${record.tool} is running`)
        : status === 'input_required'
          ? (record.statusMessage ?? "waiting for the owner's approval")
          : status === 'completed'
            ? `${record.tool} ${isError ? `answered an error (${String(((record.result?.structuredContent as Record<string, unknown> | undefined)?.error as { code?: string } | undefined)?.code ?? 'see the result')})` : 'finished'}`
            : status === 'cancelled'
              ? 'cancelled by the client; effects already made are not rolled back'
              : this.errorOf(record).message;
    const base = { taskId: record.id, status, statusMessage, createdAt: record.createdAt, lastUpdatedAt: record.updatedAt };
    if (era === 'legacy') return { ...base, ttl: record.ttlMs || null, pollInterval: TASK_POLL_MS };
    const detail: Record<string, unknown> = { ...base, ttlMs: record.ttlMs || null, pollIntervalMs: TASK_POLL_MS };
    if (status === 'input_required') detail.inputRequests = record.input;
    if (status === 'completed') detail.result = record.result;
    if (status === 'failed') detail.error = this.errorOf(record);
    return detail;
  }
}

/** The explicit schema of the tasks/* requests (the Tasks extension's reused names are served on both eras with one). */
const TASK_ID_PARAMS = z.looseObject({ taskId: z.string() });

/**
 * Registers tasks/*: get and cancel on both eras (SEP-2663 reuses the names), update for the
 * 2026-07-28 extension, result and list for 2025-11-25.
 */
export function registerTaskHandlers(server: Server, tasks: McpTasks, callerOf: (ctx: ServerContext) => TaskCaller, inputAsk?: TaskInputAsk): void {
  server.setRequestHandler('tasks/get', { params: TASK_ID_PARAMS }, (p, ctx) => tasks.get(p, callerOf(ctx), ctx) as never);
  server.setRequestHandler('tasks/update', { params: TASK_ID_PARAMS }, (p, ctx) => {
    if (!isModern(ctx)) throw new ProtocolError(ProtocolErrorCode.MethodNotFound, 'Method not found');
    return tasks.update(p, callerOf(ctx), ctx);
  });
  server.setRequestHandler('tasks/cancel', { params: TASK_ID_PARAMS }, async (p, ctx) => (await tasks.cancel(p, callerOf(ctx), ctx)) as never);
  server.setRequestHandler('tasks/result', { params: TASK_ID_PARAMS }, async (p, ctx) => (await tasks.result(p, callerOf(ctx), ctx.mcpReq.signal, inputAsk)) as never);
  server.setRequestHandler('tasks/list', { params: z.looseObject({ cursor: z.string().optional() }) }, (p, ctx) => tasks.list(p, callerOf(ctx)) as never);
}
