/** Toolsets and access narrowing (issue #16), and published schemas strict validators accept. */
import { describe, expect, it } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { CATALOG } from '../../src/tools/index.js';
import { ToolRegistry } from '../../src/mcp/registry.js';
import { accessFromScope, accessProblem, intersect, parseReadonlyHeader, parseToolsets, PRESETS, scopeFromAccess, TOOLSETS, toolsetOf } from '../../src/core/toolsets.js';

const registry = new ToolRegistry(CATALOG);

describe('toolsets', () => {
  it('every tool is in exactly one toolset, and every toolset has tools', () => {
    for (const d of CATALOG) expect(toolsetOf(d), d.name).toBeDefined();
    for (const t of Object.keys(TOOLSETS)) expect(CATALOG.some((d) => toolsetOf(d) === t), t).toBe(true);
  });

  it('parses names, aliases and presets; the full set is null (everything)', () => {
    expect(parseToolsets('code')).toEqual(['commands', 'files', 'git', 'workspace']);
    expect(parseToolsets('Files, tasks  github')).toEqual(['files', 'repohost', 'sessions']);
    expect(parseToolsets('all')).toBeNull();
    expect(parseToolsets('')).toBeNull();
    expect(parseToolsets(undefined)).toBeNull();
    for (const p of Object.keys(PRESETS)) expect(() => parseToolsets(p)).not.toThrow();
    expect(() => parseToolsets('code,../etc')).toThrow(/unknown toolset/);
    expect(() => parseToolsets('x'.repeat(1000))).toThrow(/too long/);
    expect(() => parseToolsets(Array(41).fill('git').join(','))).toThrow(/at most 40/);
  });

  it('narrowing never widens', () => {
    const code = { toolsets: parseToolsets('code'), readOnly: false };
    expect(intersect(code, { toolsets: ['agents', 'git'], readOnly: false }).toolsets).toEqual(['git']);
    expect(intersect(code, { toolsets: null, readOnly: true })).toEqual({ toolsets: code.toolsets, readOnly: true });
    expect(intersect({ toolsets: null, readOnly: true }, { toolsets: null, readOnly: false }).readOnly).toBe(true);
  });

  it('read-only refuses every tool not badged readOnly, whatever its toolset', () => {
    for (const d of CATALOG) {
      const p = accessProblem({ toolsets: null, readOnly: true }, d);
      expect(p === null, d.name).toBe(d.badges.includes('readOnly'));
    }
  });

  it('header and scope parsing', () => {
    expect(parseReadonlyHeader('TRUE')).toBe(true);
    expect(parseReadonlyHeader('0')).toBe(false);
    expect(parseReadonlyHeader(undefined)).toBe(false);
    expect(() => parseReadonlyHeader('maybe')).toThrow();
    expect(accessFromScope('mcp')).toEqual({ toolsets: null, readOnly: false });
    expect(accessFromScope('toolset:code readonly')).toEqual({ toolsets: ['commands', 'files', 'git', 'workspace'], readOnly: true });
    expect(() => accessFromScope('admin')).toThrow(/unknown scope/);
    expect(scopeFromAccess(accessFromScope('toolset:git readonly'))).toBe('toolset:git readonly');
  });
});

describe('published schemas', () => {
  it('every tool input schema compiles under Ajv strict mode (draft 2020-12), with no empty-object additionalProperties', () => {
    const ajv = new Ajv2020({ strict: true, strictTypes: true, strictTuples: true, strictRequired: true, allowUnionTypes: true, validateFormats: false });
    for (const t of registry.list) {
      expect(() => ajv.compile(t.inputSchema), t.name).not.toThrow();
      expect(JSON.stringify(t.inputSchema), t.name).not.toContain('"additionalProperties":{}');
    }
    const open = registry.list.find((t) => t.name === 'workspace_open')!.inputSchema as { properties: Record<string, Record<string, unknown>> };
    // Their real shapes (docs/extensions.md): named overrides of a closed shape, skill sets of a closed shape.
    expect(open.properties.skillOverrides).toMatchObject({ type: 'object', propertyNames: { type: 'string' }, additionalProperties: { type: 'object', additionalProperties: false } });
    expect((open.properties.skillSets!.items as Record<string, unknown>).additionalProperties).toBe(false);
  });
});
