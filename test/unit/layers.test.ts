/**
 * The import direction rule of docs/architecture.md, checked over the source tree rather than
 * stated in a comment: transports (mcp, dashboard, cli) → tools → services → platform (core,
 * store, sandbox, contracts); the dashboard and the MCP transport never import each other;
 * services never import tools, transports, the gateway or the composition root; core owns no
 * table (it never imports the store); the gateway, the agent runtime and the in-sandbox daemon are
 * other processes and import only what they share.
 */
import { describe, expect, it } from 'vitest';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { importsOf, type Edge } from './import-graph.js';

export { importsOf, type Edge };

const SRC = resolve(__dirname, '../../src');

/** The area of a source path relative to src/ (posix separators). */
export function areaOf(rel: string): string {
  const parts = rel.split('/');
  if (parts.length === 1) return parts[0]!.replace(/\.(js|ts)$/, '');
  // The daemon's wire contract lives in its folder (the daemon is copied into the sandbox on its
  // own and imports nothing outside it), but it is a contract both ends import.
  if (rel === 'sandbox/daemon/protocol.ts') return 'contracts';
  if (parts[0] === 'sandbox' && parts[1] === 'daemon') return 'sandbox/daemon';
  return parts[0]!;
}

/** What each area may import (besides packages and node: modules). */
const ALLOWED: Record<string, string[]> = {
  // The composition root builds everything but serves nothing.
  app: ['app', 'core', 'store', 'sandbox', 'contracts', 'services', 'tools', 'mcp', 'telemetry'],
  // The HTTP front mounts the transports.
  server: ['app', 'core', 'store', 'sandbox', 'contracts', 'services', 'tools', 'mcp', 'dashboard', 'telemetry', 'server'],
  // Transports.
  cli: ['cli', 'app', 'server', 'core', 'store', 'sandbox', 'contracts', 'services', 'tools', 'mcp', 'dashboard', 'gateway', 'telemetry'],
  mcp: ['mcp', 'app', 'core', 'sandbox', 'contracts', 'services', 'tools', 'telemetry'],
  dashboard: ['dashboard', 'app', 'core', 'sandbox', 'contracts', 'services', 'tools'],
  // Tools reach services only (no store, no App).
  tools: ['tools', 'services', 'core', 'sandbox', 'contracts'],
  services: ['services', 'core', 'store', 'sandbox', 'contracts', 'telemetry'],
  // Platform.
  core: ['core', 'contracts'],
  store: ['store', 'core'],
  sandbox: ['sandbox', 'sandbox/daemon', 'core', 'contracts', 'telemetry'],
  contracts: ['contracts', 'core'], // type-only: wire types name core's pricing and provider types
  // Other processes.
  gateway: ['gateway', 'core', 'contracts', 'telemetry'],
  agent: ['agent', 'contracts'],
  'sandbox/daemon': ['sandbox/daemon', 'contracts'],
  types: ['types'],
  // OpenTelemetry and prom-client helpers (issue #35): platform, used by every runner layer and the gateway.
  telemetry: ['telemetry', 'core'],
};

/**
 * Known exceptions, each with its reason. An exception no import uses any more fails the test, so
 * the list only shrinks.
 */
const EXCEPTIONS: Array<{ from: RegExp; to: RegExp; why: string }> = [];

/** Every import that breaks the rule, as "from → to (areas)"; and the exceptions no import used. */
export function violations(edges: Edge[]): { broken: string[]; unusedExceptions: string[] } {
  const used = new Set<number>();
  const broken: string[] = [];
  for (const e of edges) {
    const a = areaOf(e.from);
    const b = areaOf(e.to);
    const allowed = ALLOWED[a];
    if (!allowed) {
      broken.push(`${e.from}: area ${a} is not in the layer map of test/unit/layers.test.ts (classify it)`);
      continue;
    }
    if (allowed.includes(b)) continue;
    const i = EXCEPTIONS.findIndex((x) => x.from.test(e.from) && x.to.test(e.to));
    if (i >= 0) {
      used.add(i);
      continue;
    }
    broken.push(`${e.from} → ${e.to} (${a} may not import ${b})`);
  }
  const unusedExceptions = EXCEPTIONS.filter((_, i) => !used.has(i)).map((x) => `${x.from} → ${x.to}: ${x.why}`);
  return { broken, unusedExceptions };
}

function sourceTree(): Edge[] {
  const edges: Edge[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (p.endsWith('.ts')) edges.push(...importsOf(relative(SRC, p).split('\\').join('/'), readFileSync(p, 'utf8')));
    }
  };
  walk(SRC);
  return edges;
}

describe('import direction', () => {
  it('holds over the whole source tree', () => {
    const edges = sourceTree();
    // The scan sees the tree (hundreds of relative imports), so a silent parser failure cannot pass.
    expect(edges.length).toBeGreaterThan(400);
    expect(edges.some((e) => e.from === 'server.ts' && e.to === 'mcp/http.ts')).toBe(true);
    const { broken, unusedExceptions } = violations(edges);
    expect(broken).toEqual([]);
    expect(unusedExceptions).toEqual([]);
  });

  it('nothing under src/dashboard imports src/mcp, and the reverse', () => {
    const edges = sourceTree();
    expect(edges.filter((e) => areaOf(e.from) === 'dashboard' && areaOf(e.to) === 'mcp')).toEqual([]);
    expect(edges.filter((e) => areaOf(e.from) === 'mcp' && areaOf(e.to) === 'dashboard')).toEqual([]);
  });

  it('reads every form of import and reports each broken rule', () => {
    const files: Record<string, string> = {
      'dashboard/x.ts': "import { a } from '../mcp/registry.js';\nimport type {\n  B,\n  C,\n} from '../mcp/http.js';",
      'mcp/y.ts': "export { d } from '../dashboard/routes.js';",
      'services/z.ts': "const t = await import('../tools/index.js');\nimport '../dashboard/assets.js';\nimport { ok } from './other.js';",
      'services/g.ts': "import type { Snapshot } from '../gateway/server.js';",
      'core/w.ts': "import type { DB } from '../store/db.js';",
      'tools/v.ts': "import type { App } from '../app.js';\nimport { x } from 'zod';",
      'core/fine.ts': "import { q } from './ids.js';\nimport { z } from 'zod';",
    };
    const edges = Object.entries(files).flatMap(([rel, src]) => importsOf(rel, src));
    const { broken } = violations(edges);
    expect(broken).toEqual([
      'dashboard/x.ts → mcp/registry.ts (dashboard may not import mcp)',
      'dashboard/x.ts → mcp/http.ts (dashboard may not import mcp)',
      'mcp/y.ts → dashboard/routes.ts (mcp may not import dashboard)',
      'services/z.ts → tools/index.ts (services may not import tools)',
      'services/z.ts → dashboard/assets.ts (services may not import dashboard)',
      'services/g.ts → gateway/server.ts (services may not import gateway)',
      'core/w.ts → store/db.ts (core may not import store)',
      'tools/v.ts → app.ts (tools may not import app)',
    ]);
  });

  it('refuses an area nobody classified', () => {
    const { broken } = violations([{ from: 'newthing/a.ts', to: 'core/ids.ts' }]);
    expect(broken).toEqual(['newthing/a.ts: area newthing is not in the layer map of test/unit/layers.test.ts (classify it)']);
  });
});
