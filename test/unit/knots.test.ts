/**
 * The small knots of issue #43 item 5, held over the source tree so they do not tie again:
 * - the App extends the tools' service interface instead of repeating it, and the registry's host
 *   type does not import the App (no app ⇄ registry circle);
 * - the application's gauges (telemetry/app-metrics.ts) are handed what they read: they import
 *   nothing above telemetry and core;
 * - core/raw-text.ts does not import the daemon protocol (nor anything of src/sandbox);
 * - the store-reading token cache is built by the composition root only;
 * - the knowledge store's ranking is an option of the service, not a module-level switch.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { importsOf } from './import-graph.js';

const SRC = resolve(__dirname, '../../src');
const read = (rel: string) => readFileSync(join(SRC, rel), 'utf8');
const importsFrom = (rel: string) => importsOf(rel, read(rel)).map((e) => e.to);

function filesUnder(dir: string): string[] {
  return readdirSync(join(SRC, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(`${dir}/${e.name}`) : e.name.endsWith('.ts') ? [`${dir}/${e.name}`] : []));
}

/** The field names declared in an interface's body (`readonly name:` lines). */
function fieldsOf(source: string, head: RegExp): string[] {
  const m = head.exec(source);
  if (!m) return [];
  const body = source.slice(m.index + m[0].length, source.indexOf('\n}\n', m.index));
  return [...body.matchAll(/^ {2}readonly (\w+)\??:/gm)].map((x) => x[1]!);
}

describe('the knots of issue #43', () => {
  it('App extends ToolServices and repeats none of its fields; the registry does not import the App', () => {
    const tools = fieldsOf(read('tools/context.ts'), /export interface ToolServices \{/);
    expect(tools.length).toBeGreaterThan(15);
    const app = read('app.ts');
    expect(app).toMatch(/export interface App extends ToolServices \{/);
    expect(fieldsOf(app, /export interface App extends ToolServices \{/).filter((f) => tools.includes(f))).toEqual([]);
    expect(importsFrom('mcp/registry.ts')).not.toContain('app.ts');
  });

  it('the application gauges import nothing above telemetry and core', () => {
    expect(importsFrom('telemetry/app-metrics.ts').filter((to) => !to.startsWith('telemetry/') && !to.startsWith('core/'))).toEqual([]);
  });

  it('core/raw-text.ts imports nothing of src/sandbox', () => {
    expect(importsFrom('core/raw-text.ts').filter((to) => to.startsWith('sandbox/'))).toEqual([]);
  });

  it('only the composition root builds the token cache', () => {
    const builders = filesUnder('.').filter((rel) => /new TokenVerifyCache\(/.test(read(rel)));
    expect(builders.map((rel) => rel.replace(/^\.\//, ''))).toEqual(['app.ts']);
  });

  it('the knowledge store has no module-level switch: its ranking is an option', () => {
    const setters = filesUnder('services/knowledge').flatMap((rel) => [...read(rel).matchAll(/^export function (set[A-Z]\w*)/gm)].map((m) => `${rel}: ${m[1]}`));
    expect(setters).toEqual([]);
    expect(read('services/knowledge/store.ts')).toMatch(/ranking\?: Partial<RankingOptions>/);
  });
});
