/**
 * One schema snapshot per tool (issue #13 item 7): the published form of every tool (name,
 * description, input JSON Schema, annotations), written from the registry to
 * test/unit/tool-schemas/<tool>.json, so a change of the surface names its tool in review.
 * Update deliberately with `npx vitest run test/unit/tool-schemas.test.ts -u`.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ToolRegistry } from '../../src/mcp/registry.js';
import { CATALOG } from '../../src/tools/index.js';

const DIR = join(import.meta.dirname, 'tool-schemas');
const registry = new ToolRegistry(CATALOG);

describe('published tool schemas', () => {
  for (const tool of registry.list) {
    it(tool.name, async () => {
      await expect(JSON.stringify(tool, null, 2) + '\n').toMatchFileSnapshot(join(DIR, `${tool.name}.json`));
    });
  }
  it('no snapshot is left for a tool that is gone', () => {
    const files = readdirSync(DIR).filter((f) => f.endsWith('.json')).map((f) => f.slice(0, -5));
    expect(files.sort()).toEqual(registry.list.map((t) => t.name).sort());
  });
});
