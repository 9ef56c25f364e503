import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, connectV1, connectV2, startService, type Service } from './harness.js';
import { DISCOVERY_TOOLS, parseConstraint, readSpecTools } from './spec.js';
import type { Client } from '@modelcontextprotocol/client';
import { TASK_TOOLS } from '../../src/mcp/tasks.js';
import { ToolRegistry } from '../../src/mcp/registry.js';
import { BEYOND_SPEC_TOOLS, CATALOG } from '../../src/tools/index.js';
import { HINT_DEFAULTS, patternLength } from '../../src/tools/validate.js';

type JsonSchema = {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  pattern?: string;
  enum?: unknown[];
  const?: unknown;
  default?: unknown;
  anyOf?: JsonSchema[];
  not?: unknown;
  items?: JsonSchema;
  additionalProperties?: unknown;
};

interface Tool {
  name: string;
  description?: string;
  inputSchema: JsonSchema;
  annotations?: Record<string, boolean>;
}

let svc: Service;
let v2: Client;
let tools: Tool[];
const spec = readSpecTools();

beforeAll(async () => {
  svc = await startService();
  v2 = await connectV2(svc);
  tools = (await v2.listTools()).tools as Tool[];
});

afterAll(async () => {
  await v2?.close();
  await svc?.dispose();
});

describe('the published catalog', () => {
  it('has exactly the 107 tools the spec names, no more, no fewer, besides the tools beyond the spec in domains of their own', () => {
    expect(spec).toHaveLength(107);
    // The discovery tools are listed only in the dynamic mode (test/e2e/dynamic-toolsets.test.ts).
    const beyond = new Set(CATALOG.filter((t) => t.domain.endsWith('(beyond the spec)') && !DISCOVERY_TOOLS.includes(t.name)).map((t) => t.name));
    for (const n of beyond) expect(spec.some((s) => s.name === n), n).toBe(false);
    for (const n of DISCOVERY_TOOLS) expect(tools.some((t) => t.name === n), n).toBe(false);
    expect(tools.filter((t) => !beyond.has(t.name)).map((t) => t.name).sort()).toEqual(spec.map((s) => s.name).sort());
    expect(tools.filter((t) => beyond.has(t.name)).map((t) => t.name).sort()).toEqual([...beyond].sort());
  });

  it('the v1 client lists the same tools and can call one', async () => {
    const v1 = await connectV1(svc);
    try {
      const listed = (await v1.listTools()).tools;
      expect(listed.map((t) => t.name)).toEqual(tools.map((t) => t.name));
      const r = await call(v1, 'files_read', {});
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.error.details.field).toBe('path');
    } finally {
      await v1.close();
    }
  });

  it('turns every badge into its hint, read with MCP\'s defaults for absent hints (destructiveHint only on tools that are not read-only)', () => {
    const hint: Record<string, keyof typeof HINT_DEFAULTS> = { readOnly: 'readOnlyHint', destructive: 'destructiveHint', idempotent: 'idempotentHint', openWorld: 'openWorldHint' };
    for (const s of spec) {
      const t = tools.find((x) => x.name === s.name)!;
      for (const [badge, key] of Object.entries(hint)) {
        if (key === 'destructiveHint' && s.badges.includes('readOnly')) {
          expect(t.annotations?.[key], `${s.name}.${key}`).toBeUndefined();
          continue;
        }
        expect(t.annotations?.[key] ?? HINT_DEFAULTS[key], `${s.name}.${key}`).toBe(s.badges.includes(badge));
      }
    }
  });

  it('describes every tool for a model', () => {
    for (const t of tools) expect(t.description!.length, t.name).toBeGreaterThan(40);
  });

  it('publishes strict input objects', () => {
    for (const t of tools) {
      expect(t.inputSchema.type, t.name).toBe('object');
      expect(t.inputSchema.additionalProperties, t.name).toBe(false);
    }
  });

  it('carries every required field, range, length and default the spec gives', () => {
    const problems: string[] = [];
    for (const s of spec) {
      const t = tools.find((x) => x.name === s.name)!;
      const props = t.inputSchema.properties ?? {};
      for (const r of s.required) {
        if (!props[r]) problems.push(`${s.name}.${r}: missing`);
        else if (!(t.inputSchema.required ?? []).includes(r)) problems.push(`${s.name}.${r}: not required`);
      }
      for (const [field, text] of s.params) {
        const p = props[field];
        if (!p) {
          problems.push(`${s.name}.${field}: missing`);
          continue;
        }
        const e = parseConstraint(text);
        const isInt = p.type === 'integer' || p.type === 'number';
        const isStr = p.type === 'string';
        if (e.min !== undefined && isInt && p.minimum !== e.min) problems.push(`${s.name}.${field}: minimum ${p.minimum} != ${e.min}`);
        if (e.max !== undefined && isInt && p.maximum !== e.max) problems.push(`${s.name}.${field}: maximum ${p.maximum} != ${e.max}`);
        // A string's length bound is its maxLength, or what its anchored pattern fixes (the published
        // schema drops a maxLength the pattern already states: src/tools/validate.ts withoutRestatements).
        const byPattern = p.pattern ? patternLength(p.pattern) : null;
        if (e.min !== undefined && isStr && !p.pattern && p.minLength !== e.min) problems.push(`${s.name}.${field}: minLength ${p.minLength} != ${e.min}`);
        if (e.max !== undefined && isStr && Math.min(p.maxLength ?? Infinity, byPattern?.max ?? Infinity) > e.max) problems.push(`${s.name}.${field}: maxLength ${p.maxLength} > ${e.max}`);
        if (e.def !== undefined) {
          const want = e.def === 'true' ? true : e.def === 'false' ? false : e.def === '[]' ? [] : e.def === '{}' ? {} : /^\d+$/.test(e.def) ? Number(e.def) : e.def;
          if (e.def.startsWith('[') && e.def !== '[]') {
            const list = e.def.slice(1, -1).split(',').map((x) => x.trim());
            if (JSON.stringify(p.default) !== JSON.stringify(list)) problems.push(`${s.name}.${field}: default ${JSON.stringify(p.default)} != ${JSON.stringify(list)}`);
          } else if (JSON.stringify(p.default) !== JSON.stringify(want)) {
            problems.push(`${s.name}.${field}: default ${JSON.stringify(p.default)} != ${JSON.stringify(want)}`);
          }
        }
      }
    }
    expect(problems).toEqual([]);
  });

  it('serves exactly the published tools of the registry, pinned one file per tool by test/unit/tool-schemas.test.ts', () => {
    // A 2025-11-25 client also sees which tools may run as MCP tasks (execution.taskSupport, issue
    // #32: src/mcp/tasks.ts): the thirteen long tools say "optional", the others nothing; the rest of
    // every tool is exactly the registry's.
    const withoutExecution = tools.map(({ execution: _e, ...rest }) => rest);
    expect(withoutExecution).toEqual(new ToolRegistry(CATALOG).list.filter((t) => !DISCOVERY_TOOLS.includes(t.name)));
    for (const t of tools) expect(t.execution, t.name).toEqual(TASK_TOOLS.has(t.name) ? { taskSupport: 'optional' } : undefined);
    expect(tools.filter((t) => t.execution).length).toBe(13);
  });
});

/** A value that breaks one constraint of a property, or undefined when it has none we can break. */
function invalidValue(p: JsonSchema): unknown {
  if (p.not !== undefined) return 'anything';
  if (p.const !== undefined) return typeof p.const === 'boolean' ? !p.const : 'not-the-constant';
  if (p.enum) return 'not-one-of-the-values';
  if (p.type === 'integer' || p.type === 'number') {
    if (p.maximum !== undefined && p.maximum < Number.MAX_SAFE_INTEGER) return p.maximum + 1;
    if (p.minimum !== undefined) return p.minimum - 1;
    return 1.5;
  }
  if (p.type === 'string') {
    if (p.maxLength !== undefined) return 'x'.repeat(p.maxLength + 1);
    if (p.minLength !== undefined && p.minLength > 0) return '';
    if (p.pattern) return ' \u0000 ';
    return 42;
  }
  if (p.type === 'array') {
    if (p.maxItems !== undefined) return new Array(p.maxItems + 1).fill('x');
    return 'not-an-array';
  }
  if (p.type === 'boolean') return 'yes';
  if (p.type === 'object') return 'not-an-object';
  if (p.anyOf) return { not: 'matching' };
  return undefined;
}

describe('bad input across the whole catalog', () => {
  it('every tool refuses a missing required field with INVALID_ARGUMENT naming it', async () => {
    const failures: string[] = [];
    let checked = 0;
    for (const t of tools) {
      const required = t.inputSchema.required ?? [];
      if (required.length === 0) continue;
      const r = await call(v2, t.name, {});
      checked++;
      if (r.ok) failures.push(`${t.name}: accepted {}`);
      else if (r.error.code !== 'INVALID_ARGUMENT' || !required.includes(String(r.error.details.field)) || !r.error.message.includes(String(r.error.details.field)))
        failures.push(`${t.name}: ${r.error.code} ${r.error.message}`);
    }
    expect(failures).toEqual([]);
    expect(checked).toBeGreaterThan(60);
  });

  it('every tool refuses an out-of-range value with INVALID_ARGUMENT naming the field', async () => {
    const failures: string[] = [];
    for (const t of tools) {
      const props = t.inputSchema.properties ?? {};
      const field = Object.keys(props).find((k) => invalidValue(props[k]!) !== undefined);
      if (!field) {
        failures.push(`${t.name}: no constrained field`);
        continue;
      }
      const r = await call(v2, t.name, { [field]: invalidValue(props[field]!) });
      if (r.ok) failures.push(`${t.name}.${field}: accepted`);
      else {
        const issues = (r.error.details.issues as Array<{ field: string }>) ?? [];
        if (r.error.code !== 'INVALID_ARGUMENT' || !issues.some((i) => i.field === field) || !r.error.message.includes(field))
          failures.push(`${t.name}.${field}: ${r.error.code} ${r.error.message}`);
      }
    }
    expect(failures).toEqual([]);
  });

  it('refuses unknown fields by name, and the retired networkMode points to networkProfile', async () => {
    const r = await call(v2, 'workspace_list', { limitt: 5 });
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.code).toBe('INVALID_ARGUMENT');
      expect(r.error.details.field).toBe('limitt');
    }
    const n = await call(v2, 'workspace_open', { repositoryUrl: 'https://example.com/r.git', idempotencyKey: 'key-12345', networkMode: 'none' });
    expect(n.ok).toBe(false);
    if (!n.ok) {
      expect(n.error.code).toBe('INVALID_ARGUMENT');
      expect(n.error.details.field).toBe('networkMode');
      expect(n.error.message).toContain('networkProfile');
    }
  });

  it('an unknown tool is a structured error, and the server keeps answering', async () => {
    const r = await call(v2, 'no_such_tool', {});
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.code).toBe('NOT_FOUND');
    const again = await call(v2, 'files_read', { path: 'x', limit: 2_000_000 });
    expect(again.ok).toBe(false);
    if (!again.ok) expect(again.error.details.field).toBe('limit');
  });

  it('error text and structured error say the same thing', async () => {
    const r = await call(v2, 'files_write', { path: '', content: 'x' });
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.text).toBe(`${r.error.code}: ${r.error.message}`);
      expect(typeof r.error.retryable).toBe('boolean');
    }
  });
});
