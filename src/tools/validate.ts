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
  annotations: { readOnlyHint?: boolean; destructiveHint?: boolean; idempotentHint?: boolean; openWorldHint?: boolean };
}

const has = (badges: Badge[], b: Badge) => badges.includes(b);

/**
 * The hints of a tool's badges, with only what differs from MCP's defaults (readOnlyHint false,
 * destructiveHint true, idempotentHint false, openWorldHint true): a client that applies the
 * defaults reads every badge exactly. destructiveHint means something only for a tool that is not
 * read-only (the MCP schema's own words), so a read-only tool does not carry it. Decision:
 * docs/decisions.md "Compact annotations".
 */
export function annotationsOf(badges: Badge[]): PublishedTool['annotations'] {
  const out: PublishedTool['annotations'] = {};
  if (has(badges, 'readOnly')) out.readOnlyHint = true;
  else if (!has(badges, 'destructive')) out.destructiveHint = false;
  if (has(badges, 'idempotent')) out.idempotentHint = true;
  if (!has(badges, 'openWorld')) out.openWorldHint = false;
  return out;
}

/** MCP's defaults for absent hints (the schema's ToolAnnotations). */
export const HINT_DEFAULTS = { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true } as const;

/** The JSON Schema a client sees: draft 2020-12, input side (defaults make fields optional). */
export function publishedSchema(schema: z.ZodObject): PublishedTool['inputSchema'] {
  const js = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any', target: 'draft-2020-12' }) as PublishedTool['inputSchema'];
  delete js.$schema;
  return withoutRestatements(strictFriendly(js)) as PublishedTool['inputSchema'];
}

/**
 * Drops what a schema states twice (issue #45 item 1), never a constraint: an integer's bound at
 * JSON's safe-integer limit (every integer a client can send exactly is inside it), the pattern zod
 * writes beside a `format` (date, date-time, email, …: the format states the rule), and a string's
 * minLength / maxLength that its anchored pattern already fixes (`^ws_[A-Za-z0-9_-]{20,80}$` is 23
 * to 83 characters). Validation is unchanged: the zod schema keeps every check.
 */
export function withoutRestatements(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withoutRestatements);
  if (!node || typeof node !== 'object') return node;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(node as Record<string, unknown>)) out[k] = withoutRestatements(v);
  if (out.maximum === MAX_SAFE) delete out.maximum;
  if (out.minimum === -MAX_SAFE) delete out.minimum;
  // zod writes its own regular expression for a format beside the format itself (a date-time's is
  // 600 characters); the format names the same rule, and is what clients read.
  if (typeof out.format === 'string' && FORMATS_WITH_PATTERNS.has(out.format)) delete out.pattern;
  if (typeof out.pattern === 'string') {
    const b = patternLength(out.pattern);
    if (b && out.minLength === b.min) delete out.minLength;
    if (b && out.maxLength === b.max) delete out.maxLength;
  }
  return out;
}

const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const FORMATS_WITH_PATTERNS = new Set(['date', 'date-time', 'time', 'duration', 'email', 'uuid', 'ipv4', 'ipv6', 'uri']);

/**
 * The lengths (in characters) every string matching an anchored pattern has, or null when the
 * pattern is not one this reads: `^…$` over ASCII literal characters, escapes, classes `[…]` (not negated), groups with
 * `|`, and the quantifiers `{n}`, `{m,n}`, `?`, `*`, `+` (max Infinity when unbounded).
 */
export function patternLength(pattern: string): { min: number; max: number } | null {
  if (!pattern.startsWith('^') || !pattern.endsWith('$') || pattern.endsWith('\\$')) return null;
  let i = 1;
  const end = pattern.length - 1;
  const seq = (): { min: number; max: number } | null => {
    const alts: Array<{ min: number; max: number }> = [];
    let cur = { min: 0, max: 0 };
    while (i < end && pattern[i] !== ')') {
      const c = pattern[i]!;
      if (c === '|') {
        alts.push(cur);
        cur = { min: 0, max: 0 };
        i++;
        continue;
      }
      let atom: { min: number; max: number } | null;
      if (c === '(') {
        i++;
        if (pattern[i] === '?') return null;
        atom = seq();
        if (!atom || pattern[i] !== ')') return null;
        i++;
      } else if (c === '[') {
        // A class (not negated) of ASCII characters, ranges and the escapes \w \d \. \- \/ \_.
        if (pattern[i + 1] === '^') return null;
        let j = i + 1;
        while (j < end && pattern[j] !== ']') {
          if (pattern[j] === '\\' && !/[wd.\-/_]/.test(pattern[j + 1] ?? '')) return null;
          if (pattern.charCodeAt(j) > 0x7f) return null;
          j += pattern[j] === '\\' ? 2 : 1;
        }
        if (j >= end || j === i + 1) return null;
        i = j + 1;
        atom = { min: 1, max: 1 };
      } else if (c === '\\') {
        if (!/[.\-\\/^$*+?()[\]{}|wd]/.test(pattern[i + 1] ?? '')) return null;
        i += 2;
        atom = { min: 1, max: 1 };
      } else if ('.^$*+?{}]'.includes(c)) {
        // `.` (and below, a negated class) may match a character outside the BMP, which JSON Schema
        // counts as one and the validator as two: no length is read from those.
        return null;
      } else {
        if (c.charCodeAt(0) > 0x7f) return null;
        i++;
        atom = { min: 1, max: 1 };
      }
      const q = /^(?:\{(\d+)(?:,(\d*))?\}|[?*+])/.exec(pattern.slice(i, end));
      let lo = 1;
      let hi = 1;
      if (q) {
        i += q[0].length;
        if (q[0] === '?') (lo = 0), (hi = 1);
        else if (q[0] === '*') (lo = 0), (hi = Infinity);
        else if (q[0] === '+') (lo = 1), (hi = Infinity);
        else (lo = Number(q[1])), (hi = q[2] === undefined ? lo : q[2] === '' ? Infinity : Number(q[2]));
      }
      cur = { min: cur.min + atom.min * lo, max: cur.max + atom.max * hi };
    }
    alts.push(cur);
    return { min: Math.min(...alts.map((a) => a.min)), max: Math.max(...alts.map((a) => a.max)) };
  };
  const r = seq();
  return r && i === end ? r : null;
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
/**
 * Arguments a client adds to every tool for its own use and passes on to the server, which no tool
 * of the catalog has: dropped before the strict check when they have the client's type (issue #45
 * item 4). The Gemini CLI adds `wait_for_previous` (boolean: run the call after the turn's earlier
 * ones) to each tool's schema and sends it when its model sets it (docs/clients.md, "Gemini CLI").
 */
export const CLIENT_ARGUMENTS: Record<string, (v: unknown) => boolean> = {
  wait_for_previous: (v) => typeof v === 'boolean',
};

function withoutClientArguments(def: AnyToolDef, args: object): object {
  const extra = Object.keys(CLIENT_ARGUMENTS).filter((k) => Object.hasOwn(args, k) && !(k in def.input) && CLIENT_ARGUMENTS[k]!((args as Record<string, unknown>)[k]));
  if (extra.length === 0) return args;
  const out = { ...(args as Record<string, unknown>) };
  for (const k of extra) delete out[k];
  return out;
}

export function parseArgs(def: AnyToolDef, schema: z.ZodObject, raw: unknown): Record<string, unknown> {
  const given = raw ?? {};
  if (typeof given !== 'object' || Array.isArray(given)) throw validationError(def.name, [{ field: '(arguments)', rule: 'must be an object' }]);
  const args = withoutClientArguments(def, given);
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
