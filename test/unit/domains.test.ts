/**
 * The house rules of src/services/ (issue #43 item 6, docs/architecture.md "Services by domain"),
 * checked over the source tree beside the layer rules of layers.test.ts:
 *
 * - one domain, one name: every entry of src/services/ is a listed domain, one file until it needs
 *   a second, then a folder; never `x.ts` beside `x/`, no `service.ts`; tool files are named after
 *   the domain their tools belong to;
 * - one door: a domain folder's `index.ts` is the only module of it that anything outside the
 *   folder imports (static, type-only, re-exporting or dynamic imports; tests may reach inside);
 * - the size note: no module of src/services/ over SIZE_LIMIT lines without a `Size:` line in its
 *   header saying why.
 *
 * Each rule has a list of known exceptions with their reason. An exception that no longer applies
 * fails the test, so the lists only shrink.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { importsOf } from './import-graph.js';

const SRC = resolve(__dirname, '../../src');
const SERVICES = join(SRC, 'services');

/** The domains of src/services/: a name here is a file `<name>.ts` or a folder `<name>/`. */
const DOMAINS = [
  'access', // owner tokens and sessions, OAuth, login throttle, principals, the token cache
  'agents',
  'approvals',
  'artifacts',
  'checkpoints',
  'code-intel', // issue #44 (language servers): listed ahead of its arrival
  'commands', // operations, tasks, calls, terminals
  'environments',
  'extensions',
  'files',
  'git',
  'instance', // audit, idempotency, backups, health
  'knowledge',
  'memories',
  'models', // profiles, catalog, checks, spend, the price list, the gateway client
  'packages',
  'previews', // links and the HTTP gate
  'repohost',
  'repos', // the repository policy, credentials, the credential broker
  'workspaces', // lifecycle, sandboxes, disks, recovery, templates
];

/** Tool modules that are not a domain's tools: the framework every tool module uses. */
const TOOL_FRAMEWORK = ['context', 'define', 'index', 'types', 'validate'];
/** Tool modules named otherwise than a domain, with the reason. */
const TOOL_NAME_EXCEPTIONS: Record<string, string> = {
  discovery: "the dynamic mode's discovery tools (issue #45) call no service: their state is the MCP transport's (src/mcp/dynamic-toolsets.ts), handed over as ctx.toolsets",
};

/** Imports into a domain folder past its door, with the reason (`from → to`, paths under src/). */
const DOOR_EXCEPTIONS: Array<{ from: RegExp; to: RegExp; why: string }> = [];

export const SIZE_LIMIT = 600;
/** Modules over the limit without a Size: line, to be split (issue #43 item 2). */
const SIZE_EXCEPTIONS: Record<string, string> = {};

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? filesUnder(p) : p.endsWith('.ts') ? [relative(SRC, p).split('\\').join('/')] : [];
  });
}

/** What breaks the domain-name rule in a listing of src/services/ (names of files and folders). */
export function nameProblems(entries: Array<{ name: string; dir: boolean }>, domains: string[]): string[] {
  const problems: string[] = [];
  const folders = new Set(entries.filter((e) => e.dir).map((e) => e.name));
  for (const e of entries) {
    const domain = e.dir ? e.name : e.name.replace(/\.ts$/, '');
    if (!e.dir && !e.name.endsWith('.ts')) problems.push(`services/${e.name}: not a module`);
    else if (!domains.includes(domain)) problems.push(`services/${e.name}: ${domain} is not a listed domain (add it to DOMAINS in test/unit/domains.test.ts, or put it in its domain's folder)`);
    if (!e.dir && folders.has(domain)) problems.push(`services/${e.name} beside services/${domain}/: the file belongs in the folder`);
  }
  return problems;
}

/** Imports from outside a domain folder to a module of it other than its index.ts. */
export function doorProblems(edges: Array<{ from: string; to: string }>, folders: string[]): string[] {
  const out: string[] = [];
  for (const e of edges) {
    const m = /^services\/([^/]+)\//.exec(e.to);
    if (!m || !folders.includes(m[1]!)) continue;
    if (e.from.startsWith(`services/${m[1]}/`)) continue;
    if (e.to === `services/${m[1]}/index.ts`) continue;
    out.push(`${e.from} → ${e.to}`);
  }
  return out;
}

/** A module's header (the first comment block) gives a reason for its size. */
export function hasSizeNote(source: string): boolean {
  const head = /^\s*\/\*\*?([\s\S]*?)\*\//.exec(source);
  return head !== null && /^\s*\*?\s*Size:/m.test(head[1]!);
}

function serviceEntries(): Array<{ name: string; dir: boolean }> {
  return readdirSync(SERVICES).map((name) => ({ name, dir: statSync(join(SERVICES, name)).isDirectory() }));
}

function edgesOfTree(): Array<{ from: string; to: string }> {
  return filesUnder(SRC).flatMap((rel) => importsOf(rel, readFileSync(join(SRC, rel), 'utf8')));
}

describe('services by domain: one domain, one name', () => {
  it('the check sees a stray module, a file beside its folder and an unlisted domain', () => {
    expect(nameProblems([{ name: 'memories', dir: true }, { name: 'memories.ts', dir: false }, { name: 'stuff.ts', dir: false }, { name: 'notes.md', dir: false }], ['memories'])).toEqual([
      'services/memories.ts beside services/memories/: the file belongs in the folder',
      'services/stuff.ts: stuff is not a listed domain (add it to DOMAINS in test/unit/domains.test.ts, or put it in its domain\'s folder)',
      'services/notes.md: not a module',
    ]);
  });

  it('every entry of src/services/ is a listed domain, and no file sits beside its folder', () => {
    const entries = serviceEntries();
    expect(entries.length).toBeGreaterThan(10);
    expect(nameProblems(entries, DOMAINS)).toEqual([]);
  });

  it('no module is called service.ts', () => {
    expect(filesUnder(SERVICES).filter((p) => p.endsWith('/service.ts'))).toEqual([]);
  });

  it("tool modules are named after their domain (the framework's modules apart)", () => {
    const names = readdirSync(join(SRC, 'tools')).filter((n) => n.endsWith('.ts')).map((n) => n.replace(/\.ts$/, ''));
    const stray = names.filter((n) => !TOOL_FRAMEWORK.includes(n) && !DOMAINS.includes(n) && !(n in TOOL_NAME_EXCEPTIONS));
    expect(stray).toEqual([]);
    // an exception no file needs any more goes
    expect(Object.keys(TOOL_NAME_EXCEPTIONS).filter((n) => !names.includes(n) || DOMAINS.includes(n))).toEqual([]);
  });
});

describe('services by domain: one door', () => {
  it('the check sees an import past a door and lets the door and the folder itself be', () => {
    const edges = [
      { from: 'app.ts', to: 'services/git/local.ts' },
      { from: 'app.ts', to: 'services/git/index.ts' },
      { from: 'services/git/index.ts', to: 'services/git/local.ts' },
      { from: 'services/files.ts', to: 'services/files.ts' },
    ];
    expect(doorProblems(edges, ['git'])).toEqual(['app.ts → services/git/local.ts']);
  });

  it('every domain folder has its index.ts, and nothing outside a folder imports past it', () => {
    const folders = serviceEntries().filter((e) => e.dir).map((e) => e.name);
    expect(folders.filter((f) => !existsSync(join(SERVICES, f, 'index.ts')))).toEqual([]);
    const edges = edgesOfTree();
    expect(edges.length).toBeGreaterThan(400);
    const used = new Set<number>();
    const broken = doorProblems(edges, folders).filter((line) => {
      const [from, to] = line.split(' → ') as [string, string];
      const i = DOOR_EXCEPTIONS.findIndex((x) => x.from.test(from) && x.to.test(to));
      if (i >= 0) used.add(i);
      return i < 0;
    });
    expect(broken).toEqual([]);
    expect(DOOR_EXCEPTIONS.filter((_, i) => !used.has(i)).map((x) => x.why)).toEqual([]);
  });
});

describe('services by domain: the size note', () => {
  it('the check reads a Size: line in the header only', () => {
    expect(hasSizeNote('/**\n * The thing.\n *\n * Size: one dispatch table.\n */\nexport {};')).toBe(true);
    expect(hasSizeNote('/** The thing. */\n// Size: not in the header\n')).toBe(false);
  });

  it(`no module of src/services/ is over ${SIZE_LIMIT} lines without a Size: line in its header`, () => {
    const over = filesUnder(SERVICES)
      .map((rel) => ({ rel, source: readFileSync(join(SRC, rel), 'utf8') }))
      .filter(({ source }) => source.split('\n').length > SIZE_LIMIT && !hasSizeNote(source))
      .map(({ rel }) => rel);
    expect(over.filter((rel) => !(rel in SIZE_EXCEPTIONS))).toEqual([]);
    // an exception for a module now under the limit (or gone, or with its note) goes
    expect(Object.keys(SIZE_EXCEPTIONS).filter((rel) => !over.includes(rel))).toEqual([]);
  });
});
