/**
 * The tool registry: what every tool gets alike, as a pipeline of small steps (each exported and
 * testable alone): parse (strict validation, tools/validate.ts), implemented (NOT_IMPLEMENTED
 * names the issue), resolve the workspace (an omitted workspaceId is the caller's active one),
 * idempotent replay by key, run, redact secret values, audit and log. Every failure becomes the
 * error envelope of docs/errors.md.
 */
import type { Logger } from '../core/log.js';
import type { AuditLog, CallStats, IdempotencyStore } from '../services/instance/index.js';
import type { AuthService, PrincipalState } from '../services/access/index.js';
import type { EnvironmentService } from '../services/environments.js';
import type { AnyToolDef } from '../tools/define.js';
import type { Actor, ToolContext, ToolServices } from '../tools/context.js';
import { ToolParser, parseArgs, type PublishedTool } from '../tools/validate.js';
import { ServiceError, errorEnvelope, notImplemented, type ErrorBody } from '../core/errors.js';
import { accessProblem, type Access } from '../core/toolsets.js';
import { callerGrant, commandsRefusal, withCaller, COMMAND_TOOL, type CallerGrant } from '../core/caller.js';
import { WorkspaceLocks } from '../core/locks.js';
import type { LogNotifier } from './logging.js';
import { wireText, type WireText } from './wire-text.js';
import { InputRequired, runWithApprovals, type InCallApprovals } from './in-call-approvals.js';
import { SpanKind, extractContext, failSpan, inSpan, setAttrs, stepSpan, type Span } from '../telemetry/tracing.js';
import { recordToolCall } from '../telemetry/metrics.js';

export type { PublishedTool } from '../tools/validate.js';
export { validationError } from '../tools/validate.js';

export interface CallToolResult {
  [k: string]: unknown;
  content: Array<{ type: 'text'; text: string }>;
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
}

export interface CallContext {
  principal: string;
  actor: Actor;
  signal: AbortSignal;
  progress?: (progress: number, total?: number, message?: string) => void;
  /** What this caller may see and call (toolsets, read-only); absent means everything. */
  access?: Access;
  /**
   * A proxied call of an agent: the agent's proxyOperations (with `access`, the access of whoever
   * spawned its tree): the call is checked exactly as a direct call with that access would be, and
   * only these tools may be called.
   */
  operations?: Iterable<string>;
  /** MCP log notifications (notifications/message) where the client asked for them. */
  log?: LogNotifier;
  /**
   * A transport that writes a large result's text block from its pieces (src/mcp/wire-text.ts):
   * takes them and returns the stand-in text the result carries until the transport sends it.
   * Absent: the text block holds the text itself.
   */
  deferText?: (text: WireText) => string;
  /**
   * Sees a successful result (redacted) with the workspace the call acted on, before it is shaped:
   * the MCP endpoint adds resource_link items from it (src/mcp/resources.ts).
   */
  onResult?: (tool: string, workspaceId: string | undefined, result: Record<string, unknown>) => void;
  /**
   * The client can open an owner approval inside the call (src/mcp/in-call-approvals.ts): a refusal
   * for a pending approval then waits for the owner instead of answering. Absent: today's refusal.
   */
  approvals?: InCallApprovals;
  /** Where a command's output goes as it comes (a call run as an MCP task: its operation's log). */
  output?: (chunk: Buffer) => void;
  /** The request's params._meta: its traceparent/tracestate (SEP-414) parent the call's span (src/telemetry/tracing.ts). */
  meta?: Record<string, unknown>;
  /** The dynamic mode of the MCP connection (src/mcp/dynamic-toolsets.ts), for the discovery tools. */
  toolsets?: ToolContext['toolsets'];
}

/** What the pipeline needs of the application besides the services it hands to handlers. */
export interface RegistryHost extends ToolServices {
  readonly log: Logger;
  readonly audit: AuditLog;
  readonly idempotency: IdempotencyStore;
  readonly principals: PrincipalState;
  readonly auth: AuthService;
  readonly environments: EnvironmentService;
  readonly callStats?: CallStats;
}

// ---------- results ----------

/**
 * A result at or above this many characters of JSON crosses the wire once: as the text block only.
 * Below it, the result is sent twice as MCP recommends (structuredContent, and its JSON as text for
 * clients that read only content). Claude Code and Codex give the model structuredContent when it is
 * present and the content text otherwise, so both see the same JSON either way (docs/architecture.md).
 */
export const LARGE_RESULT_CHARS = 64 * 1024;

/** A tool call running longer than this is logged (warn, "tool call still running"), and again at each further interval. */
export const SLOW_CALL_MS = 20_000;

export function okResult(structured: Record<string, unknown>, deferText?: CallContext['deferText']): CallToolResult {
  if (deferText) {
    // Large string fields: serialized once, straight to the wire form, by the transport.
    const wire = wireText(structured, LARGE_RESULT_CHARS);
    if (wire) return { content: [{ type: 'text', text: deferText(wire) }] };
  }
  const text = JSON.stringify(structured);
  if (text.length >= LARGE_RESULT_CHARS) return { content: [{ type: 'text', text }] };
  return { content: [{ type: 'text', text }], structuredContent: structured };
}

/** A failed call as MCP carries it: the envelope (built by errorEnvelope) as structuredContent, and "<code>: <message>" as text. */
export function errorResult(body: ErrorBody): CallToolResult {
  return {
    isError: true,
    content: [{ type: 'text', text: `${body.code}: ${body.message}` }],
    structuredContent: { error: body },
  };
}

const TARGET_FIELDS = ['workspaceId', 'profileId', 'agentId', 'taskId', 'shellId', 'sessionId', 'operationId', 'artifactId', 'memoryId', 'id', 'planId', 'bindingId', 'applyId', 'path', 'repositoryUrl'];

// ---------- the steps ----------

/** Step: a definition without `run` answers NOT_IMPLEMENTED naming its issue. */
export function requireImplemented(def: AnyToolDef): NonNullable<AnyToolDef['run']> {
  if (!def.run) throw notImplemented(def.name, def.tracking);
  return def.run;
}

/**
 * Step: the caller's grant (toolsets, read-only, an agent's proxyOperations) allows the tool;
 * enforced on every call, not only hidden from tools/list. A tool that runs commands indirectly
 * (runsCommands) needs a caller that could run exec_run itself.
 */
export function requireAccess(grant: CallerGrant, def: AnyToolDef): void {
  const problem = grant.problem(def.name);
  if (problem) {
    const rule = grant.access.readOnly && !def.badges.includes('readOnly') ? 'read-only access' : grant.operations && !grant.operations.has(def.name) && !accessProblem(grant.access, def) ? 'not among the agent\'s proxyOperations' : 'toolset not granted';
    throw new ServiceError('PERMISSION_DENIED', problem, { tool: def.name, rule });
  }
  if (def.runsCommands && !grant.mayRunCommands)
    throw new ServiceError('PERMISSION_DENIED', commandsRefusal(def.name, grant), { tool: def.name, rule: `runs commands: needs ${COMMAND_TOOL}` });
}

/** The published tools this access shows in tools/list. */
export function visibleTools(registry: ToolRegistry, access: Access | undefined): PublishedTool[] {
  if (!access) return registry.list;
  return registry.list.filter((t) => !accessProblem(access, registry.get(t.name)!));
}

/** Step: the workspace a call acts on: the given id, else the principal's active workspace. */
export function resolveWorkspace(host: Pick<RegistryHost, 'principals'>, principal: string, given: string | undefined): string {
  if (given) return given;
  const active = host.principals.activeWorkspace(principal);
  if (!active)
    throw new ServiceError(
      'FAILED_PRECONDITION',
      'workspaceId: not given and there is no active workspace; pass workspaceId, or call workspace_open or workspace_set_active first',
      { field: 'workspaceId', rule: 'active workspace required' },
    );
  return active;
}

/** Step: the context a handler runs with (services only; no store, no secrets). */
export function handlerContext(host: RegistryHost, cc: CallContext, def: AnyToolDef, args: Record<string, unknown>, grant: CallerGrant): ToolContext {
  // A tool that needs a workspace only for some calls (def.workspaceLazy: the knowledge store and memory
  // notes, whose owner scope needs none) resolves it when it reads ctx.workspace, not before it runs.
  const given = args.workspaceId as string | undefined;
  const workspace = def.workspace && !def.workspaceLazy ? resolveWorkspace(host, cc.principal, given) : undefined;
  const workspaceIfAny = def.workspace ? (workspace ?? given ?? host.principals.activeWorkspace(cc.principal) ?? undefined) : undefined;
  return {
    services: host,
    owner: host.auth.ownerId,
    actor: cc.actor,
    principal: cc.principal,
    signal: cc.signal,
    progress: cc.progress ?? (() => undefined),
    log: cc.log ?? (() => undefined),
    get workspace(): string {
      if (def.workspace && def.workspaceLazy) return resolveWorkspace(host, cc.principal, given);
      if (workspace === undefined) throw new Error(`${def.name}: ctx.workspace read on a tool that declares no workspace`);
      return workspace;
    },
    workspaceIfAny,
    workspaceId: (given) => resolveWorkspace(host, cc.principal, given),
    activeWorkspace: () => host.principals.activeWorkspace(cc.principal) ?? undefined,
    caller: grant,
    output: cc.output,
    toolsets: cc.toolsets,
  };
}

/**
 * Step: the audit record of a call (state-changing calls, and refusals that matter), written as
 * soon as the answer has gone out (AuditLog.recordAfterReply).
 */
export function auditCall(host: Pick<RegistryHost, 'audit' | 'log'>, cc: CallContext, tool: string, args: Record<string, unknown>, outcome: 'ok' | 'refused' | 'failed', reason?: string): void {
  const targetField = TARGET_FIELDS.find((f) => typeof args[f] === 'string');
  try {
    host.audit.recordAfterReply({
      actor: cc.actor,
      principal: cc.principal,
      action: tool,
      target: targetField ? String(args[targetField]) : null,
      outcome,
      reason: reason ?? null,
    });
  } catch (e) {
    host.log.error({ err: e }, 'audit write failed');
  }
}

/** Step: replay by idempotency key (same input: first result with replayed:true; different input: CONFLICT). */
export class IdempotentRunner {
  /** Concurrent calls with one key run one at a time (core/locks.ts), so the second one replays the first. */
  constructor(private readonly locks: WorkspaceLocks = new WorkspaceLocks()) {}

  async run(
    host: Pick<RegistryHost, 'idempotency'>,
    tool: string,
    key: string,
    args: Record<string, unknown>,
    run: () => Promise<Record<string, unknown>> | Record<string, unknown>,
  ): Promise<Record<string, unknown>> {
    const scope = `tool:${tool}`;
    return this.locks.idempotencyKey(`${scope}\u0000${key}`, async () => {
      const replay = host.idempotency.lookup(scope, key, args);
      if (replay) return { ...replay.result, replayed: true };
      const result = await run();
      host.idempotency.save(scope, key, args, result);
      return result;
    });
  }
}

export class ToolRegistry extends ToolParser {
  private readonly idempotent: IdempotentRunner;
  private published: PublishedTool[] | undefined;

  /** `locks`: the runner's one lock module (the idempotency keys share it with the workspaces' locks). */
  constructor(defs: AnyToolDef[], locks: WorkspaceLocks = new WorkspaceLocks()) {
    super(defs);
    this.idempotent = new IdempotentRunner(locks);
  }

  /** The grant of a call's caller: its access, and for an agent its operations. */
  grant(cc: Pick<CallContext, 'access' | 'operations' | 'actor'>): CallerGrant {
    const agentId = typeof cc.actor === 'string' && cc.actor.startsWith('agent_') ? cc.actor : null;
    return callerGrant(cc.access, cc.operations ?? null, agentId, (t) => this.get(t));
  }

  /** Every tool's published form (compiled on first use; the server reads it at start). */
  get list(): PublishedTool[] {
    return (this.published ??= this.names().map((n) => this.compiled(n)!.published));
  }

  /**
   * The pipeline: parse, implemented, context (workspace), idempotent run, redact, audit, log.
   * Traced (one span per call, a child span per step) and counted in /metrics (src/telemetry/).
   */
  async call(host: RegistryHost, name: string, raw: unknown, cc: CallContext): Promise<CallToolResult> {
    const started = performance.now();
    let outcome = 'ok';
    const parent = extractContext([cc.meta]);
    return inSpan(`tools/call ${name}`, { kind: SpanKind.SERVER, parent, attributes: { 'mcp.method.name': 'tools/call', 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': name, 'atelier.actor': typeof cc.actor === 'string' ? cc.actor : 'owner' } }, async (span) => {
      try {
        const result = await this.pipeline(host, name, raw, cc, span);
        if (result.isError) outcome = ((result.structuredContent?.error as { code?: string } | undefined)?.code ?? 'error');
        return result;
      } catch (e) {
        outcome = e instanceof InputRequired ? 'input_required' : 'INTERNAL';
        throw e;
      } finally {
        if (outcome !== 'ok') failSpan(span, null, outcome);
        setAttrs(span, { 'atelier.outcome': outcome });
        recordToolCall(this.compiled(name) ? name : 'unknown', outcome, (performance.now() - started) / 1000);
      }
    });
  }

  private async pipeline(host: RegistryHost, name: string, raw: unknown, cc: CallContext, span: Span | undefined): Promise<CallToolResult> {
    const c = this.compiled(name);
    if (!c) return errorResult(errorEnvelope(new ServiceError('NOT_FOUND', `unknown tool ${name}; tools/list names every tool`, { tool: name })).body.error);
    const readOnly = c.def.badges.includes('readOnly');
    let args: Record<string, unknown> | undefined;
    const started = Date.now();
    let ok: boolean | undefined; // the outcome counted for the dashboard's overview (services/instance/health.ts)
    // A call still running after SLOW_CALL_MS says so in the log, and again every SLOW_CALL_MS: what
    // an operator (or a timed-out test's log dump) needs to tell which call hangs.
    const watchdog = setInterval(() => {
      host.log.warn({ tool: name, workspaceId: args?.workspaceId, ms: Date.now() - started }, 'tool call still running');
    }, SLOW_CALL_MS);
    watchdog.unref();
    try {
      const grant = this.grant(cc);
      stepSpan('registry.access', () => requireAccess(grant, c.def));
      args = stepSpan('registry.parse', () => parseArgs(c.def, c.schema, raw));
      const run = requireImplemented(c.def);
      const parsedArgs = args;
      const ctx = stepSpan('registry.resolve', () => handlerContext(host, cc, c.def, parsedArgs, grant));
      if (c.def.workspace && ctx.workspaceIfAny) setAttrs(span, { 'atelier.workspace.id': ctx.workspaceIfAny });
      const parsed = args;
      const key = c.def.idempotency === 'key' && typeof args.idempotencyKey === 'string' ? args.idempotencyKey : undefined;
      // A key replays within the workspace it acted on: an omitted workspaceId is keyed as the one it resolved to.
      const keyed = c.def.workspace ? { ...args, workspaceId: ctx.workspaceIfAny ?? null } : args;
      // Everything the call reaches (a hook fired inside git_commit) runs as this caller (core/caller.ts).
      // A refusal for a pending owner approval waits for the owner where the client can open it (in-call-approvals.ts).
      const attempt = () => runWithApprovals(host.approvals, cc.approvals, name, cc.signal, async () => inSpan('registry.run', {}, () => run(parsed, ctx)));
      const result = await withCaller(grant, () => (key ? inSpan('registry.idempotent', { attributes: { 'atelier.idempotency.keyed': true } }, () => this.idempotent.run(host, name, key, keyed, attempt)) : attempt()));
      if (!readOnly) stepSpan('registry.audit', () => auditCall(host, cc, name, parsedArgs, 'ok'));
      host.log.debug({ tool: name, ms: Date.now() - started }, 'tool call');
      // Secret values never leave in a result, whatever the tool.
      const redacted = stepSpan('registry.redact', () => host.environments.redact(result));
      if (!c.def.workspace && typeof redacted.workspaceId === 'string') setAttrs(span, { 'atelier.workspace.id': redacted.workspaceId });
      cc.onResult?.(name, c.def.workspace ? ctx.workspaceIfAny : undefined, redacted);
      ok = true;
      return okResult(redacted, cc.deferText);
    } catch (err) {
      // The call ends with an input_required result (2026-07-28): no outcome yet, nothing to audit or replay.
      if (err instanceof InputRequired) throw err;
      const body = errorEnvelope(err, (b) => host.environments.redact(b)).body.error;
      if (!(err instanceof ServiceError)) host.log.error({ tool: name, err }, 'tool handler failed');
      else host.log.info({ tool: name, code: body.code, ms: Date.now() - started }, 'tool call refused');
      if (!readOnly || body.code === 'PERMISSION_DENIED' || body.code === 'OWNER_APPROVAL_REQUIRED') {
        auditCall(host, cc, name, args ?? {}, body.code === 'INTERNAL' ? 'failed' : 'refused', `${body.code}: ${body.message}`);
      }
      ok = false;
      return errorResult(body);
    } finally {
      clearInterval(watchdog);
      if (ok !== undefined) host.callStats?.record(name, Date.now() - started, ok);
    }
  }
}
