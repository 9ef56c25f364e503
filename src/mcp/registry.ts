/**
 * The tool registry: what every tool gets alike. Badges become annotations (an absent badge is an
 * explicit false), input is validated before any handler runs (strict objects: unknown fields are
 * refused), an omitted workspaceId resolves to the caller's active workspace, idempotency keys
 * replay, calls that change state are audited, and every failure becomes the error envelope of
 * docs/errors.md.
 */
import { z } from 'zod';
import type { App } from '../app.js';
import type { AnyToolDef, Badge } from '../tools/define.js';
import type { ToolContext } from '../tools/context.js';
import { ServiceError, notImplemented, toErrorBody, type ErrorBody } from '../core/errors.js';

export interface CallToolResult {
  [k: string]: unknown;
  content: Array<{ type: 'text'; text: string }>;
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
}

export interface PublishedTool {
  name: string;
  title?: string;
  description: string;
  inputSchema: { type: 'object'; [k: string]: unknown };
  annotations: { readOnlyHint: boolean; destructiveHint: boolean; idempotentHint: boolean; openWorldHint: boolean };
}

interface Compiled {
  def: AnyToolDef;
  schema: z.ZodObject;
  published: PublishedTool;
}

export interface CallContext {
  principal: string;
  actor: ToolContext['actor'];
  signal: AbortSignal;
  progress?: (progress: number, total?: number, message?: string) => void;
}

const has = (badges: Badge[], b: Badge) => badges.includes(b);

export function annotationsOf(badges: Badge[]): PublishedTool['annotations'] {
  return {
    readOnlyHint: has(badges, 'readOnly'),
    destructiveHint: has(badges, 'destructive'),
    idempotentHint: has(badges, 'idempotent'),
    openWorldHint: has(badges, 'openWorld'),
  };
}

/** The JSON Schema a client sees: draft 2020-12, input side (defaults make fields optional). */
export function publishedSchema(schema: z.ZodObject): PublishedTool['inputSchema'] {
  const js = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any', target: 'draft-2020-12' }) as PublishedTool['inputSchema'];
  delete js.$schema;
  return js;
}

// ---------- validation messages ----------

function fieldOf(path: PropertyKey[]): string {
  return path.length === 0 ? '(arguments)' : path.map((p) => (typeof p === 'number' ? `[${p}]` : String(p))).join('.').replace(/\.\[/g, '[');
}

interface Problem {
  field: string;
  rule: string;
}

function describeIssue(issue: z.core.$ZodIssue, input: unknown): Problem[] {
  const field = fieldOf(issue.path);
  const at = (obj: unknown, path: PropertyKey[]): unknown =>
    path.reduce<unknown>((o, k) => (o !== null && typeof o === 'object' ? (o as Record<PropertyKey, unknown>)[k] : undefined), obj);
  switch (issue.code) {
    case 'invalid_type': {
      const got = at(input, issue.path);
      if (got === undefined) return [{ field, rule: 'is required' }];
      if (issue.expected === 'never') return [{ field, rule: 'must not be sent' }];
      const kind = got === null ? 'null' : Array.isArray(got) ? 'array' : typeof got;
      return [{ field, rule: `must be ${issue.expected === 'int' ? 'an integer' : `of type ${issue.expected}`} (got ${kind})` }];
    }
    case 'too_small': {
      const unit = issue.origin === 'string' ? ' characters' : issue.origin === 'array' ? ' items' : '';
      const min = issue.minimum as number;
      if (issue.origin === 'string' || issue.origin === 'array')
        return [{ field, rule: `must have at least ${min}${unit}` }];
      return [{ field, rule: `must be ${issue.inclusive ? 'at least' : 'greater than'} ${min}` }];
    }
    case 'too_big': {
      const unit = issue.origin === 'string' ? ' characters' : issue.origin === 'array' ? ' items' : '';
      const max = issue.maximum as number;
      if (issue.origin === 'string' || issue.origin === 'array')
        return [{ field, rule: `must have at most ${max}${unit}` }];
      return [{ field, rule: `must be ${issue.inclusive ? 'at most' : 'less than'} ${max}` }];
    }
    case 'invalid_format': {
      const i = issue as z.core.$ZodIssueInvalidStringFormat;
      if (i.format === 'regex') return [{ field, rule: `must match the pattern ${i.pattern}` }];
      return [{ field, rule: `must be a valid ${i.format}` }];
    }
    case 'invalid_value': {
      const values = (issue.values as unknown[]).map((v) => JSON.stringify(v));
      return [{ field, rule: values.length === 1 ? `must be ${values[0]}` : `must be one of ${values.join(', ')}` }];
    }
    case 'unrecognized_keys':
      return issue.keys.map((k) => ({ field: fieldOf([...issue.path, k]), rule: 'is not a field of this tool' }));
    case 'invalid_union':
      return [{ field, rule: 'does not match any allowed form' }];
    case 'not_multiple_of':
      return [{ field, rule: `must be a multiple of ${issue.divisor}` }];
    default:
      return [{ field, rule: issue.message }];
  }
}

export function validationError(tool: string, problems: Problem[]): ServiceError {
  const text = problems.map((p) => `${p.field} ${p.rule}`).join('; ');
  return new ServiceError('INVALID_ARGUMENT', `${tool}: invalid arguments: ${text}`, {
    field: problems[0]!.field,
    rule: problems[0]!.rule,
    issues: problems,
  });
}

// ---------- results ----------

export function okResult(structured: Record<string, unknown>): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(structured) }], structuredContent: structured };
}

export function errorResult(body: ErrorBody): CallToolResult {
  return {
    isError: true,
    content: [{ type: 'text', text: `${body.code}: ${body.message}` }],
    structuredContent: { error: body },
  };
}

const TARGET_FIELDS = ['workspaceId', 'profileId', 'agentId', 'taskId', 'shellId', 'sessionId', 'operationId', 'artifactId', 'memoryId', 'id', 'planId', 'bindingId', 'applyId', 'path', 'repositoryUrl'];

export class ToolRegistry {
  private readonly tools = new Map<string, Compiled>();
  readonly list: PublishedTool[];
  private readonly inflightKeys = new Map<string, Promise<unknown>>();

  constructor(defs: AnyToolDef[]) {
    for (const def of defs) {
      if (this.tools.has(def.name)) throw new Error(`duplicate tool ${def.name}`);
      const schema = z.strictObject(def.input);
      this.tools.set(def.name, {
        def,
        schema,
        published: {
          name: def.name,
          description: def.description,
          inputSchema: publishedSchema(schema),
          annotations: annotationsOf(def.badges),
        },
      });
    }
    this.list = [...this.tools.values()].map((c) => c.published);
  }

  get(name: string): AnyToolDef | undefined {
    return this.tools.get(name)?.def;
  }

  /** Validates and parses arguments; throws INVALID_ARGUMENT naming the field and the rule. */
  parse(name: string, raw: unknown): Record<string, unknown> {
    const c = this.tools.get(name);
    if (!c) throw new ServiceError('NOT_FOUND', `unknown tool ${name}`, { tool: name });
    const args = raw ?? {};
    if (typeof args !== 'object' || Array.isArray(args)) throw validationError(name, [{ field: '(arguments)', rule: 'must be an object' }]);
    for (const [field, message] of Object.entries(c.def.retired ?? {})) {
      if (field in (args as object)) throw new ServiceError('INVALID_ARGUMENT', `${name}: ${message}`, { field, rule: 'retired' });
    }
    const r = c.schema.safeParse(args);
    if (!r.success) throw validationError(name, r.error.issues.flatMap((i) => describeIssue(i, args)));
    const parsed = r.data as Record<string, unknown>;
    const problem = c.def.check?.(parsed);
    if (problem) throw validationError(name, [{ field: problem.field, rule: problem.message }]);
    return parsed;
  }

  async call(app: App, name: string, raw: unknown, cc: CallContext): Promise<CallToolResult> {
    const c = this.tools.get(name);
    if (!c) return errorResult(new ServiceError('NOT_FOUND', `unknown tool ${name}; tools/list names every tool`, { tool: name }).toBody());
    const readOnly = c.def.badges.includes('readOnly');
    let args: Record<string, unknown> | undefined;
    const started = Date.now();
    try {
      args = this.parse(name, raw);
      if (!c.def.run) throw notImplemented(name, c.def.tracking);
      const ctx = this.context(app, cc);
      const key = c.def.idempotency === 'key' && typeof args.idempotencyKey === 'string' ? args.idempotencyKey : undefined;
      const result = key ? await this.withIdempotency(app, name, key, args, () => c.def.run!(args!, ctx)) : await c.def.run(args, ctx);
      if (!readOnly) this.audit(app, cc, name, args, 'ok');
      app.log.debug({ tool: name, ms: Date.now() - started }, 'tool call');
      // Secret values never leave in a result, whatever the tool.
      return okResult(app.environments.redact(result));
    } catch (err) {
      const body = toErrorBody(err);
      if (!(err instanceof ServiceError)) app.log.error({ tool: name, err }, 'tool handler failed');
      else app.log.info({ tool: name, code: body.code, ms: Date.now() - started }, 'tool call refused');
      if (!readOnly || body.code === 'PERMISSION_DENIED' || body.code === 'OWNER_APPROVAL_REQUIRED') {
        this.audit(app, cc, name, args ?? {}, body.code === 'INTERNAL' ? 'failed' : 'refused', `${body.code}: ${body.message}`);
      }
      return errorResult(app.environments.redact(body));
    }
  }

  private async withIdempotency(
    app: App,
    tool: string,
    key: string,
    args: Record<string, unknown>,
    run: () => Promise<Record<string, unknown>> | Record<string, unknown>,
  ): Promise<Record<string, unknown>> {
    const scope = `tool:${tool}`;
    const lockKey = `${scope}\u0000${key}`;
    // Concurrent calls with one key run one at a time, so the second one replays the first.
    while (this.inflightKeys.has(lockKey)) await this.inflightKeys.get(lockKey)!.catch(() => undefined);
    const replay = app.idempotency.lookup(scope, key, args);
    if (replay) return { ...replay.result, replayed: true };
    const p = (async () => {
      const result = await run();
      app.idempotency.save(scope, key, args, result);
      return result;
    })();
    this.inflightKeys.set(lockKey, p);
    try {
      return await p;
    } finally {
      this.inflightKeys.delete(lockKey);
    }
  }

  private context(app: App, cc: CallContext): ToolContext {
    return {
      app,
      owner: app.auth.ownerId,
      actor: cc.actor,
      principal: cc.principal,
      signal: cc.signal,
      progress: cc.progress ?? (() => undefined),
      workspaceId: (given) => {
        if (given) return given;
        const active = app.principals.activeWorkspace(cc.principal);
        if (!active)
          throw new ServiceError(
            'FAILED_PRECONDITION',
            'workspaceId: not given and there is no active workspace; pass workspaceId, or call workspace_open or workspace_set_active first',
            { field: 'workspaceId', rule: 'active workspace required' },
          );
        return active;
      },
    };
  }

  private audit(app: App, cc: CallContext, tool: string, args: Record<string, unknown>, outcome: 'ok' | 'refused' | 'failed', reason?: string): void {
    const targetField = TARGET_FIELDS.find((f) => typeof args[f] === 'string');
    try {
      app.audit.record({
        actor: cc.actor,
        principal: cc.principal,
        action: tool,
        target: targetField ? String(args[targetField]) : null,
        outcome,
        reason: reason ?? null,
      });
    } catch (e) {
      app.log.error({ err: e }, 'audit write failed');
    }
  }
}
