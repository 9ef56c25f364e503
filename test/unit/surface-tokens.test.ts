/**
 * What the tool list costs (issue #45 item 1), under test so the surface cannot grow back
 * unnoticed: the tokens of every tool's published form (o200k_base, gpt-tokenizer) pinned in
 * test/unit/tool-tokens.json (update deliberately with `npx vitest run test/unit/surface-tokens.test.ts -u`,
 * and the diff names the tools that grew), the goals on the whole list, and the proof that making
 * the schemas smaller dropped no constraint: the published schema of every tool is the JSON Schema
 * zod generates, minus descriptions and exactly the restatements src/tools/validate.ts documents.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { encode } from 'gpt-tokenizer/encoding/o200k_base';
import { ToolRegistry } from '../../src/mcp/registry.js';
import { CATALOG } from '../../src/tools/index.js';
import { inputSchemaOf, patternLength, strictFriendly } from '../../src/tools/validate.js';
import { CORE_TOOLS, DISCOVERY_TOOLSET, PRESETS, TOOLSETS } from '../../src/core/toolsets.js';

const registry = new ToolRegistry(CATALOG);
/** What an unnarrowed token lists outside the dynamic mode: every tool but the discovery tools. */
const FULL = registry.list.filter((t) => CATALOG.find((d) => d.name === t.name)!.domain !== TOOLSETS[DISCOVERY_TOOLSET]);
const tokens = (v: unknown): number => encode(JSON.stringify(v)).length;
const GOALS = { full: 24_000, largest: 2_000, code: 8_000, dynamic: 6_000 };

describe('the tokens of the tool list', () => {
  it('each tool costs what test/unit/tool-tokens.json says', async () => {
    const per = Object.fromEntries(registry.list.map((t) => [t.name, tokens(t)]));
    await expect(JSON.stringify(per, null, 2) + '\n').toMatchFileSnapshot(join(import.meta.dirname, 'tool-tokens.json'));
  });

  it(`the full surface is at most ${GOALS.full} tokens and no tool more than ${GOALS.largest}`, () => {
    expect(FULL.length).toBe(registry.list.length - 2);
    expect(tokens({ tools: FULL })).toBeLessThanOrEqual(GOALS.full);
    const largest = registry.list.map((t) => ({ name: t.name, n: tokens(t) })).sort((a, b) => b.n - a.n)[0]!;
    expect(largest.n, largest.name).toBeLessThanOrEqual(GOALS.largest);
  });

  it(`the dynamic mode's starting list (the core tools and the discovery tools) is at most ${GOALS.dynamic} tokens`, () => {
    const start = registry.list.filter((t) => CORE_TOOLS.has(t.name) || t.name.startsWith('toolsets_'));
    expect(start.length).toBe(CORE_TOOLS.size + 2);
    expect(tokens({ tools: start })).toBeLessThanOrEqual(GOALS.dynamic);
  });

  it(`the code preset is at most ${GOALS.code} tokens`, () => {
    const domains = new Set(PRESETS.code!.map((t) => TOOLSETS[t]));
    const code = registry.list.filter((t) => domains.has(CATALOG.find((d) => d.name === t.name)!.domain));
    expect(code.length).toBeGreaterThan(40);
    expect(tokens({ tools: code })).toBeLessThanOrEqual(GOALS.code);
  });
});

type Node = Record<string, unknown>;

/**
 * Every constraint of `raw` (zod's own JSON Schema) is in `published` with the same value, except
 * the restatements withoutRestatements drops; and `published` says nothing raw does not. Returns
 * the differences as "tool path key" strings.
 */
function lost(raw: unknown, published: unknown, at: string): string[] {
  if (Array.isArray(raw)) {
    if (!Array.isArray(published) || published.length !== raw.length) return [`${at}: array differs`];
    return raw.flatMap((r, i) => lost(r, published[i], `${at}[${i}]`));
  }
  if (!raw || typeof raw !== 'object') return JSON.stringify(raw) === JSON.stringify(published) ? [] : [`${at}: ${JSON.stringify(raw)} != ${JSON.stringify(published)}`];
  if (!published || typeof published !== 'object') return [`${at}: missing`];
  const r = raw as Node;
  const p = published as Node;
  const out: string[] = [];
  for (const [k, v] of Object.entries(r)) {
    if (k === 'description' && typeof v === 'string') continue;
    if (k in p) {
      out.push(...(k === 'properties' ? Object.keys(v as Node).flatMap((f) => lost((v as Node)[f], (p[k] as Node)[f], `${at}.${f}`)) : lost(v, p[k], `${at}.${k}`)));
      continue;
    }
    const maxSafe = (k === 'maximum' && v === Number.MAX_SAFE_INTEGER) || (k === 'minimum' && v === -Number.MAX_SAFE_INTEGER);
    const formatted = k === 'pattern' && typeof p.format === 'string';
    const bounds = typeof p.pattern === 'string' ? patternLength(p.pattern) : null;
    const byPattern = (k === 'minLength' && bounds?.min === v) || (k === 'maxLength' && bounds?.max === v);
    if (!maxSafe && !formatted && !byPattern) out.push(`${at}.${k}: dropped (${JSON.stringify(v)})`);
  }
  for (const k of Object.keys(p)) if (!(k in r) && k !== 'description') out.push(`${at}.${k}: added`);
  return out;
}

describe('a smaller schema keeps every constraint', () => {
  it('every published schema is zod\'s own minus descriptions and the documented restatements', () => {
    const problems: string[] = [];
    for (const def of CATALOG) {
      const raw = strictFriendly(z.toJSONSchema(inputSchemaOf(def), { io: 'input', unrepresentable: 'any', target: 'draft-2020-12' })) as Node;
      delete raw.$schema;
      problems.push(...lost(raw, registry.list.find((t) => t.name === def.name)!.inputSchema, def.name));
    }
    expect(problems).toEqual([]);
  });

  it('the comparison itself sees a dropped or changed constraint', () => {
    const raw = { type: 'object', properties: { a: { type: 'integer', minimum: 1, maximum: 5 }, b: { type: 'string', minLength: 2, maxLength: 9, pattern: '^x{2,9}$' } } };
    expect(lost(raw, { type: 'object', properties: { a: { type: 'integer', minimum: 1 }, b: { type: 'string', pattern: '^x{2,9}$' } } }, 't')).toEqual(['t.a.maximum: dropped (5)']);
    expect(lost(raw, { type: 'object', properties: { a: { type: 'integer', minimum: 1, maximum: 6 }, b: { type: 'string', pattern: '^x{2,8}$' } } }, 't')).toEqual(['t.a.maximum: 5 != 6', 't.b.maxLength: dropped (9)', 't.b.pattern: "^x{2,9}$" != "^x{2,8}$"']);
    expect(lost(raw, { ...raw, required: ['a'] }, 't')).toEqual(['t.required: added']);
  });

  it('reads the lengths an anchored pattern fixes, and nothing it cannot be sure of', () => {
    expect(patternLength('^ws_[\\w-]{20,80}$')).toEqual({ min: 23, max: 83 });
    expect(patternLength('^[\\w.:-]{8,128}$')).toEqual({ min: 8, max: 128 });
    expect(patternLength('^[0-9a-fA-F]{64}$')).toEqual({ min: 64, max: 64 });
    expect(patternLength('^([0-9a-f]{40}|[0-9a-f]{64})$')).toEqual({ min: 40, max: 64 });
    expect(patternLength('^((npm|uv):)?[A-Za-z0-9@/._-]{1,214}$')).toEqual({ min: 1, max: 218 });
    expect(patternLength('^a+b*$')).toEqual({ min: 1, max: Infinity });
    // Not anchored, `.`, a negated class, a lookahead, non-ASCII, an escape it does not know: no length.
    for (const p of ['ws_[a-z]{3}', '^[a-z]{3}', '^a.b$', '^[^x]{3}$', '^(?=a)a$', '^é{2}$', '^\\s{2}$', '^[a\\]]{2}$', '^[]{2}$', '^(a$', '^a\\$'])
      expect(patternLength(p), p).toBeNull();
  });

  it('a pattern that fixes the lengths is as strict as the lengths it replaces', () => {
    // For each field whose published schema dropped a length for its pattern, the validator refuses
    // one character less and one more than the pattern allows.
    const checked: string[] = [];
    for (const def of CATALOG) {
      const schema = inputSchemaOf(def);
      const published = registry.list.find((t) => t.name === def.name)!.inputSchema.properties as Record<string, Node>;
      for (const [field, p] of Object.entries(published)) {
        if (typeof p.pattern !== 'string' || p.type !== 'string' || 'maxLength' in p) continue;
        const b = patternLength(p.pattern);
        if (!b || !Number.isFinite(b.max)) continue;
        const shape = (schema.shape as Record<string, z.ZodType>)[field]!;
        expect(shape.safeParse('a'.repeat(b.max + 1)).success, `${def.name}.${field}`).toBe(false);
        checked.push(`${def.name}.${field}`);
      }
    }
    expect(checked.length).toBeGreaterThan(100);
  });
});
