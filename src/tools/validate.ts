/**
 * Argument validation shared by every transport that takes tool input (MCP, the dashboard REST,
 * agents' proxied calls): the strict input schema of a definition (with the workspace parameter
 * when declared), the published JSON Schema, badges to annotations, and INVALID_ARGUMENT errors
 * that name the field and the rule.
 */
import { z } from 'zod';
import type { AnyToolDef, Badge } from './define.js';
import { ServiceError } from '../core/errors.js';
import { WSID } from './types.js';

export interface PublishedTool {
  name: string;
  title?: string;
  description: string;
  inputSchema: { type: 'object'; [k: string]: unknown };
  annotations: { readOnlyHint: boolean; destructiveHint: boolean; idempotentHint: boolean; openWorldHint: boolean };
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
  return strictFriendly(js) as PublishedTool['inputSchema'];
}

/**
 * Rewrites constructs strict JSON Schema consumers reject or misread (issue #16): zod publishes an
 * open object as `properties: {}` plus `additionalProperties: {}`; the same meaning is written
 * `additionalProperties: true` with no empty `properties`.
 */
export function strictFriendly(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(strictFriendly);
  if (!node || typeof node !== 'object') return node;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(node as Record<string, unknown>)) {
    if (k === 'additionalProperties' && v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0) out[k] = true;
    else if (k === 'properties' && v && typeof v === 'object' && Object.keys(v).length === 0 && (node as Record<string, unknown>).additionalProperties !== false) continue;
    else if (k === 'properties' && v && typeof v === 'object') out[k] = Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([pk, pv]) => [pk, strictFriendly(pv)]));
    else out[k] = strictFriendly(v);
  }
  return out;
}

// ---------- validation messages ----------

function fieldOf(path: PropertyKey[]): string {
  return path.length === 0 ? '(arguments)' : path.map((p) => (typeof p === 'number' ? `[${p}]` : String(p))).join('.').replace(/\.\[/g, '[');
}

export interface Problem {
  field: string;
  rule: string;
}

export function describeIssue(issue: z.core.$ZodIssue, input: unknown): Problem[] {
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


/** The input schema of a definition: the declared workspace parameter first, then its fields. */
export function inputSchemaOf(def: AnyToolDef): z.ZodObject {
  if (def.workspace && 'workspaceId' in def.input) throw new Error(`${def.name}: declares workspace and a workspaceId field`);
  const ws = def.workspace === 'required' ? { workspaceId: WSID } : def.workspace === 'optional' ? { workspaceId: WSID.optional() } : {};
  return z.strictObject({ ...ws, ...def.input });
}

/**
 * Deepest nesting of arrays and objects accepted anywhere in a call's arguments (the arguments
 * object itself is level 1). Deep nesting would overflow the stack of the schema walk, the JSON
 * encoders and the store; no field of the catalog needs more than a handful of levels.
 */
export const MAX_ARGUMENT_DEPTH = 64;

/** The path of the first value nested deeper than max levels, or null; iterative, so any depth is safe to walk. */
export function tooDeep(value: unknown, max = MAX_ARGUMENT_DEPTH): PropertyKey[] | null {
  const stack: Array<{ v: unknown; depth: number; path: PropertyKey[] }> = [{ v: value, depth: 1, path: [] }];
  while (stack.length > 0) {
    const { v, depth, path } = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (depth > max) return path;
    const entries: Array<[PropertyKey, unknown]> = Array.isArray(v) ? v.map((x, i) => [i, x]) : Object.entries(v as object);
    for (const [k, x] of entries) if (x !== null && typeof x === 'object') stack.push({ v: x, depth: depth + 1, path: [...path, k] });
  }
  return null;
}

/** Validates and parses arguments against a definition; throws INVALID_ARGUMENT naming the field and the rule. */
export function parseArgs(def: AnyToolDef, schema: z.ZodObject, raw: unknown): Record<string, unknown> {
  const args = raw ?? {};
  if (typeof args !== 'object' || Array.isArray(args)) throw validationError(def.name, [{ field: '(arguments)', rule: 'must be an object' }]);
  for (const [field, message] of Object.entries(def.retired ?? {})) {
    if (field in (args as object)) throw new ServiceError('INVALID_ARGUMENT', `${def.name}: ${message}`, { field, rule: 'retired' });
  }
  const deep = tooDeep(args);
  if (deep) {
    // Name the top-level field (and where the bound was passed, shortened): the full path can be thousands of levels.
    const shown = deep.length <= 8 ? fieldOf(deep) : `${fieldOf(deep.slice(0, 4))}…(${deep.length} levels)`;
    throw new ServiceError('INVALID_ARGUMENT', `${def.name}: invalid arguments: ${String(deep[0])} nests deeper than ${MAX_ARGUMENT_DEPTH} levels (at ${shown})`, {
      field: String(deep[0]),
      rule: `must not nest arrays and objects deeper than ${MAX_ARGUMENT_DEPTH} levels`,
    });
  }
  const r = schema.safeParse(args);
  if (!r.success) throw validationError(def.name, r.error.issues.flatMap((i) => describeIssue(i, args)));
  const parsed = r.data as Record<string, unknown>;
  const problem = def.check?.(parsed);
  if (problem) throw validationError(def.name, [{ field: problem.field, rule: problem.message }]);
  return parsed;
}

/**
 * Definitions compiled once, each on first use (so building a parser costs nothing until a tool is
 * called or listed): strict schema and published form; parse by tool name.
 */
export class ToolParser {
  private readonly defs = new Map<string, AnyToolDef>();
  private readonly compiledTools = new Map<string, { def: AnyToolDef; schema: z.ZodObject; published: PublishedTool }>();

  constructor(defs: AnyToolDef[]) {
    for (const def of defs) {
      if (this.defs.has(def.name)) throw new Error(`duplicate tool ${def.name}`);
      this.defs.set(def.name, def);
    }
  }

  /** The compiled form of a tool (strict schema, published form), undefined for an unknown name. */
  protected compiled(name: string): { def: AnyToolDef; schema: z.ZodObject; published: PublishedTool } | undefined {
    let ctx = this.compiledTools.get(name);
    if (ctx) return ctx;
    const def = this.defs.get(name);
    if (!def) return undefined;
    const schema = inputSchemaOf(def);
    ctx = { def, schema, published: { name: def.name, description: def.description, inputSchema: publishedSchema(schema), annotations: annotationsOf(def.badges) } };
    this.compiledTools.set(name, ctx);
    return ctx;
  }

  /** Every tool name, in definition order. */
  protected names(): string[] {
    return [...this.defs.keys()];
  }

  get(name: string): AnyToolDef | undefined {
    return this.defs.get(name);
  }

  /** Validates and parses arguments; throws INVALID_ARGUMENT naming the field and the rule. */
  parse(name: string, raw: unknown): Record<string, unknown> {
    const c = this.compiled(name);
    if (!c) throw new ServiceError('NOT_FOUND', `unknown tool ${name}`, { tool: name });
    return parseArgs(c.def, c.schema, raw);
  }
}
