import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  analyseRepository,
  CLIENT_PROFILES,
  makeTargets,
  OVERVIEW_LIMITS,
  parseFrontMatter,
  parseGitignore,
  taskfileTasks,
  type ClientProfile,
  type OverviewOptions,
} from '../../src/sandbox/daemon/overview/index.js';
import { DaemonError } from '../../src/sandbox/daemon/protocol.js';

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'atelier-overview-'));
  dirs.push(d);
  return d;
};
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));

function repo(files: Record<string, string | Buffer>): string {
  const root = tmp();
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(dirname(join(root, rel)), { recursive: true });
    writeFileSync(join(root, rel), content);
  }
  return root;
}

const sha = (s: string | Buffer) => createHash('sha256').update(s).digest('hex');

function opts(root: string, over: Partial<OverviewOptions> = {}): OverviewOptions {
  return {
    root,
    clientProfile: 'all',
    include: ['instructions', 'languages', 'test_commands', 'skills'],
    contentMode: 'none',
    maxBytes: 32768,
    ...over,
  };
}

describe('languages', () => {
  it('counts programming languages by share, skipping ignored directories, .gitignore matches and docs/config', async () => {
    const root = repo({
      'src/a.ts': '',
      'src/b.ts': '',
      'src/ui/c.tsx': '',
      'lib/x.py': '',
      'lib/y.py': '',
      'cmd/main.go': '',
      'README.md': '# hi',
      'package.json': '{}',
      'config.yaml': '',
      'node_modules/foo/index.js': '',
      'packages/p/node_modules/bar/index.js': '',
      'dist/out.js': '',
      'vendor/v.go': '',
      '.venv/lib/site.py': '',
      'lib/__pycache__/x.cpython-312.pyc': '',
      '.gitignore': '# comment\ngenerated/\n*.gen.ts\n/top.py\n!keep.gen.ts\n',
      'generated/g.ts': '',
      'src/schema.gen.ts': '',
      'src/keep.gen.ts': '',
      'top.py': '',
      'nested/top.py': '',
    });
    const r = await analyseRepository(opts(root, { include: ['languages'] }));
    expect(r.partial).toBe(false);
    expect(r.languages).toEqual([
      { language: 'TypeScript', files: 4, share: 0.5 },
      { language: 'Python', files: 3, share: 0.375 },
      { language: 'Go', files: 1, share: 0.125 },
    ]);
    // Everything not ignored is scanned, counted or not.
    expect(r.filesScanned).toBe(12);
    expect(r.instructions).toBeUndefined();
    expect(r.testCommands).toBeUndefined();
    expect(r.skills).toBeUndefined();
  });

  it('rounds shares to three decimals and counts .h files as C++ in a C++ repository', async () => {
    const root = repo({ 'a.cpp': '', 'b.cc': '', 'c.h': '', 'd.c': '', 'e.rs': '', 'f.rs': '' });
    const r = await analyseRepository(opts(root, { include: ['languages'] }));
    expect(r.languages).toEqual([
      { language: 'C++', files: 3, share: 0.5 },
      { language: 'Rust', files: 2, share: 0.333 },
      { language: 'C', files: 1, share: 0.167 },
    ]);
  });

  it('parses simple .gitignore patterns', () => {
    const rules = parseGitignore('a/b\n/c\n**/d/e\nf/\n');
    expect(rules.map((r) => r.dirOnly)).toEqual([false, false, false, true]);
    expect(rules[0]!.re.test('a/b')).toBe(true);
    expect(rules[0]!.re.test('x/a/b')).toBe(false);
    expect(rules[1]!.re.test('c')).toBe(true);
    expect(rules[2]!.re.test('x/y/d/e')).toBe(true);
    expect(rules[3]!.re.test('deep/f')).toBe(true);
  });
});

describe('test commands', () => {
  it('finds every source in one repository', async () => {
    const root = repo({
      'package.json': JSON.stringify({ scripts: { build: 'tsc', test: 'vitest run', 'test:e2e': 'vitest run e2e', lint: 'eslint' } }),
      'pnpm-lock.yaml': '',
      Makefile: '.PHONY: test check\nCC := gcc\nall: build\ntest: all\n\tgo test ./...\ncheck lint:\n\t@true\n',
      justfile: 'set shell := ["bash", "-c"]\ntest-unit *args:\n  echo hi\n',
      'Taskfile.yml': 'version: "3"\ntasks:\n  build:\n    cmds: [go build]\n  test:\n    cmds: [go test]\nvars:\n  test: x\n',
      'pyproject.toml': '[project]\nname="x"\n\n[tool.pytest.ini_options]\naddopts="-q"\n',
      'uv.lock': '',
      'tox.ini': '[tox]\nenvlist = py312\n',
      'noxfile.py': '',
      'Cargo.toml': '[workspace]\nmembers = ["a"]\n',
      'go.mod': 'module example.com/x\n',
      'pom.xml': '<project/>',
      mvnw: '#!/bin/sh',
      'build.gradle.kts': '',
      gradlew: '#!/bin/sh',
      Gemfile: "source 'https://rubygems.org'\n",
      '.rspec': '--require spec_helper',
      Rakefile: "require 'rake/testtask'\nRake::TestTask.new(:test)\n",
      'deno.jsonc': '{\n  // tasks\n  "tasks": { "test": "deno test -A", },\n}\n',
      'composer.json': JSON.stringify({ scripts: { test: 'phpunit' } }),
      'phpunit.xml.dist': '<phpunit/>',
      'mix.exs': '',
      'Package.swift': '',
      'App.sln': '',
      'CMakeLists.txt': 'project(x)\nenable_testing()\nadd_test(NAME t COMMAND t)\n',
    });
    const r = await analyseRepository(opts(root, { include: ['test_commands'] }));
    expect(r.filesScanned).toBe(0);
    expect(r.testCommands).toEqual([
      { command: 'pnpm test', source: 'package.json scripts.test', kind: 'pnpm' },
      { command: 'pnpm run test:e2e', source: 'package.json scripts.test:e2e', kind: 'pnpm' },
      { command: 'deno task test', source: 'deno.jsonc tasks.test', kind: 'deno' },
      { command: 'make test', source: 'Makefile target test', kind: 'make' },
      { command: 'make check', source: 'Makefile target check', kind: 'make' },
      { command: 'just test-unit', source: 'justfile recipe test-unit', kind: 'just' },
      { command: 'task test', source: 'Taskfile.yml tasks.test', kind: 'task' },
      { command: 'uv run pytest', source: 'pyproject.toml [tool.pytest.ini_options]', kind: 'pytest' },
      { command: 'tox', source: 'tox.ini', kind: 'tox' },
      { command: 'nox', source: 'noxfile.py', kind: 'nox' },
      { command: 'cargo test --workspace', source: 'Cargo.toml', kind: 'cargo' },
      { command: 'go test ./...', source: 'go.mod', kind: 'go' },
      { command: './mvnw test', source: 'pom.xml', kind: 'maven' },
      { command: './gradlew test', source: 'build.gradle.kts', kind: 'gradle' },
      { command: 'bundle exec rspec', source: '.rspec', kind: 'rspec' },
      { command: 'bundle exec rake test', source: 'Rakefile', kind: 'rake' },
      { command: 'composer test', source: 'composer.json scripts.test', kind: 'composer' },
      { command: 'vendor/bin/phpunit', source: 'phpunit.xml.dist', kind: 'phpunit' },
      { command: 'mix test', source: 'mix.exs', kind: 'mix' },
      { command: 'swift test', source: 'Package.swift', kind: 'swift' },
      { command: 'dotnet test', source: 'App.sln', kind: 'dotnet' },
      { command: 'ctest --test-dir build', source: 'CMakeLists.txt', kind: 'ctest' },
    ]);
  });

  it('infers the package manager from packageManager and lockfiles and skips the npm placeholder', async () => {
    const cases: Array<[Record<string, string>, string[]]> = [
      [{ 'yarn.lock': '' }, ['yarn test', 'yarn run test:unit']],
      [{ 'bun.lockb': '' }, ['bun run test', 'bun run test:unit']],
      [{ 'package-lock.json': '{}' }, ['npm test', 'npm run test:unit']],
      [{}, ['npm test', 'npm run test:unit']],
    ];
    for (const [extra, expected] of cases) {
      const root = repo({ 'package.json': JSON.stringify({ scripts: { test: 'x', 'test:unit': 'y' } }), ...extra });
      const r = await analyseRepository(opts(root, { include: ['test_commands'] }));
      expect(r.testCommands!.map((c) => c.command)).toEqual(expected);
    }
    const declared = repo({
      'package.json': JSON.stringify({ packageManager: 'yarn@4.1.0', scripts: { test: 'x' } }),
      'package-lock.json': '{}',
    });
    expect((await analyseRepository(opts(declared, { include: ['test_commands'] }))).testCommands).toEqual([
      { command: 'yarn test', source: 'package.json scripts.test', kind: 'yarn' },
    ]);
    const placeholder = repo({ 'package.json': JSON.stringify({ scripts: { test: 'echo "Error: no test specified" && exit 1' } }) });
    expect((await analyseRepository(opts(placeholder, { include: ['test_commands'] }))).testCommands).toEqual([]);
  });

  it('finds pytest from each of its markers, and gradle and maven without wrappers', async () => {
    const cases: Array<[Record<string, string>, string, string]> = [
      [{ 'pytest.ini': '[pytest]\n' }, 'pytest', 'pytest.ini'],
      [{ 'tox.ini': '[pytest]\naddopts=-q\n' }, 'pytest', 'tox.ini [pytest]'],
      [{ 'setup.cfg': '[metadata]\nname=x\n[tool:pytest]\n' }, 'pytest', 'setup.cfg [tool:pytest]'],
      [{ 'conftest.py': '', 'poetry.lock': '' }, 'poetry run pytest', 'conftest.py'],
      [{ 'tests/conftest.py': '' }, 'pytest', 'tests/conftest.py'],
      [{ 'pyproject.toml': '[tool.pytest]\n' }, 'pytest', 'pyproject.toml [tool.pytest]'],
    ];
    for (const [files, command, source] of cases) {
      const r = await analyseRepository(opts(repo(files), { include: ['test_commands'] }));
      expect(r.testCommands).toContainEqual({ command, source, kind: 'pytest' });
    }
    const jvm = await analyseRepository(opts(repo({ 'pom.xml': '', 'build.gradle': '', 'Cargo.toml': '[package]\n' }), { include: ['test_commands'] }));
    expect(jvm.testCommands).toEqual([
      { command: 'cargo test', source: 'Cargo.toml', kind: 'cargo' },
      { command: 'mvn test', source: 'pom.xml', kind: 'maven' },
      { command: 'gradle test', source: 'build.gradle', kind: 'gradle' },
    ]);
    const deno = await analyseRepository(opts(repo({ 'deno.json': '{"tasks":{"dev":"x"}}' }), { include: ['test_commands'] }));
    expect(deno.testCommands).toEqual([{ command: 'deno test', source: 'deno.json', kind: 'deno' }]);
    const ruby = await analyseRepository(opts(repo({ Gemfile: "gem 'rails'", 'spec/a_spec.rb': '', Rakefile: 'Rails.application.load_tasks', 'bin/rails': '' }), { include: ['test_commands'] }));
    expect(ruby.testCommands).toEqual([
      { command: 'bundle exec rspec', source: 'spec/', kind: 'rspec' },
      { command: 'bin/rails test', source: 'Rakefile (Rails)', kind: 'rails' },
    ]);
  });

  it('parses Makefile targets and Taskfile tasks', () => {
    expect(makeTargets('x = 1\ny := 2\nz ::= 3\n.PHONY: a\na b: c\n\techo\n%.o: %.c\n# test:\ntest:: all\n')).toEqual(['a', 'b', 'test']);
    expect(taskfileTasks('tasks:\n    test:\n      cmds: []\n    "check":\n      deps: [test]\nincludes:\n  x: y\n')).toEqual(['test', 'check']);
  });
});

describe('instruction files', () => {
  const files: Record<string, string> = {
    'CLAUDE.md': 'claude root',
    '.claude/CLAUDE.md': 'claude dot',
    'CLAUDE.local.md': 'claude local',
    '.claude/rules/testing.md': 'claude rule',
    'AGENTS.md': 'agents root',
    'AGENTS.override.md': 'agents override',
    'packages/web/AGENTS.md': 'agents nested',
    'packages/web/CLAUDE.md': 'claude nested',
    'packages/api/AGENTS.override.md': 'override nested',
    '.github/copilot-instructions.md': 'copilot',
    '.github/instructions/ts.instructions.md': 'copilot ts',
    '.github/instructions/deep/py.instructions.md': 'copilot py',
    '.github/instructions/notes.md': 'not an instructions file',
    '.cursorrules': 'cursor legacy',
    '.cursor/rules/style.mdc': 'cursor rule',
    'GEMINI.md': 'gemini',
    'docs/GEMINI.md': 'gemini nested',
    '.windsurfrules': 'windsurf',
    '.clinerules/a.md': 'cline',
    'CONVENTIONS.md': 'aider',
    'node_modules/pkg/AGENTS.md': 'third party',
    'vendor/lib/CLAUDE.md': 'third party',
    'ignored/AGENTS.md': 'gitignored',
    '.gitignore': 'ignored/\n',
    'README.md': 'readme',
  };

  const expected: Record<ClientProfile, string[]> = {
    profile_a: [
      '.claude/CLAUDE.md',
      '.claude/rules/testing.md',
      'AGENTS.md',
      'CLAUDE.local.md',
      'CLAUDE.md',
      'packages/web/AGENTS.md',
      'packages/web/CLAUDE.md',
    ],
    profile_b: ['AGENTS.md', 'AGENTS.override.md', 'packages/api/AGENTS.override.md', 'packages/web/AGENTS.md'],
    profile_c: [
      '.github/copilot-instructions.md',
      '.github/instructions/deep/py.instructions.md',
      '.github/instructions/ts.instructions.md',
      'AGENTS.md',
      'CLAUDE.md',
      'GEMINI.md',
      'packages/web/AGENTS.md',
    ],
    profile_d: [
      '.clinerules/a.md',
      '.cursor/rules/style.mdc',
      '.cursorrules',
      '.windsurfrules',
      'AGENTS.md',
      'CONVENTIONS.md',
      'GEMINI.md',
      'docs/GEMINI.md',
      'packages/web/AGENTS.md',
    ],
    all: [],
  };

  it('selects the files of each profile, root files first, then nested ones by path', async () => {
    const root = repo(files);
    for (const profile of ['profile_a', 'profile_b', 'profile_c', 'profile_d'] as const) {
      const r = await analyseRepository(opts(root, { clientProfile: profile, include: ['instructions'] }));
      expect(r.instructions!.map((i) => i.path), profile).toEqual(expected[profile]);
      for (const i of r.instructions!) {
        expect(i.profiles).toContain(profile);
        expect(i.excerpt).toBeUndefined();
        expect(i.truncated).toBeUndefined();
      }
    }
  });

  it("'all' is the union, each file naming every profile that honours it, with size and hash", async () => {
    const root = repo(files);
    const r = await analyseRepository(opts(root, { include: ['instructions'] }));
    const paths = r.instructions!.map((i) => i.path);
    const union = new Set(Object.values(expected).flat());
    expect(new Set(paths)).toEqual(union);
    expect(paths.indexOf('packages/web/AGENTS.md')).toBeGreaterThan(paths.indexOf('CONVENTIONS.md'));
    expect(paths.slice(-4)).toEqual(['docs/GEMINI.md', 'packages/api/AGENTS.override.md', 'packages/web/AGENTS.md', 'packages/web/CLAUDE.md']);
    const byPath = new Map(r.instructions!.map((i) => [i.path, i]));
    expect(byPath.get('AGENTS.md')!.profiles).toEqual(['profile_a', 'profile_b', 'profile_c', 'profile_d']);
    expect(byPath.get('CLAUDE.md')!.profiles).toEqual(['profile_a', 'profile_c']);
    expect(byPath.get('packages/web/CLAUDE.md')!.profiles).toEqual(['profile_a']);
    expect(byPath.get('GEMINI.md')!.profiles).toEqual(['profile_c', 'profile_d']);
    expect(byPath.get('AGENTS.md')!.bytes).toBe(11);
    expect(byPath.get('AGENTS.md')!.sha256).toBe(sha('agents root'));
  });

  it('labels the four profiles by client family', () => {
    expect(Object.keys(CLIENT_PROFILES)).toEqual(['profile_a', 'profile_b', 'profile_c', 'profile_d']);
    expect(CLIENT_PROFILES.profile_a.label).toMatch(/Claude/);
    expect(CLIENT_PROFILES.profile_b.label).toMatch(/Codex/);
    expect(CLIENT_PROFILES.profile_c.label).toMatch(/Copilot/);
    expect(CLIENT_PROFILES.profile_d.label).toMatch(/Cursor/);
  });

  it('keeps the total excerpt within maxBytes, cut on UTF-8 boundaries, with truncated flags', async () => {
    // 2-byte, 3-byte and 4-byte characters so a byte cut would land mid-character.
    const a = 'é'.repeat(1500); // 3000 bytes
    const b = '€'.repeat(1000); // 3000 bytes
    const c = '😀'.repeat(750); // 3000 bytes
    const small = 'tiny';
    const root = repo({ 'AGENTS.md': a, 'CLAUDE.md': b, 'GEMINI.md': c, 'x/AGENTS.md': small });
    const r = await analyseRepository(opts(root, { contentMode: 'excerpt', maxBytes: 4096, include: ['instructions'] }));
    const items = r.instructions!;
    expect(items.map((i) => i.path)).toEqual(['AGENTS.md', 'CLAUDE.md', 'GEMINI.md', 'x/AGENTS.md']);
    const total = items.reduce((n, i) => n + Buffer.byteLength(i.excerpt!, 'utf8'), 0);
    expect(total).toBeLessThanOrEqual(4096);
    expect(items[0]).toMatchObject({ excerpt: a, truncated: false, bytes: 3000 });
    // 1096 bytes left: 365 three-byte characters (1095 bytes), not a broken fourth byte.
    expect(items[1]!.excerpt).toBe('€'.repeat(365));
    expect(items[1]!.truncated).toBe(true);
    // One byte left: too little for a 4-byte emoji, enough for the next file's first character.
    expect(items[2]).toMatchObject({ excerpt: '', truncated: true, bytes: 3000, sha256: sha(c) });
    expect(items[3]).toMatchObject({ excerpt: 't', truncated: true, bytes: 4 });
    expect(total).toBe(4096);
    for (const i of items) expect(i.excerpt).not.toContain('\uFFFD');

    const roomy = await analyseRepository(opts(root, { contentMode: 'excerpt', maxBytes: 131072, include: ['instructions'] }));
    expect(roomy.instructions!.map((i) => i.truncated)).toEqual([false, false, false, false]);
    expect(roomy.instructions!.map((i) => i.excerpt)).toEqual([a, b, c, small]);
  });

  it('never lets invalid UTF-8 grow the excerpt past the budget, and hashes large files in full', async () => {
    const junk = Buffer.alloc(10_000, 0xff); // every byte decodes to a 3-byte U+FFFD
    const big = Buffer.alloc(3 * 1024 * 1024, 'a');
    const root = repo({ 'AGENTS.md': junk, 'CLAUDE.md': big });
    const r = await analyseRepository(opts(root, { contentMode: 'excerpt', maxBytes: 4096, include: ['instructions'] }));
    const total = r.instructions!.reduce((n, i) => n + Buffer.byteLength(i.excerpt!, 'utf8'), 0);
    expect(total).toBeLessThanOrEqual(4096);
    expect(r.instructions![0]!.truncated).toBe(true);
    expect(r.instructions![1]).toMatchObject({ bytes: big.length, sha256: sha(big), truncated: true });
  });
});

describe('sandbox safety', () => {
  it('does not read instruction files or markers that link out of the root, nor walk linked directories', async () => {
    const outside = repo({ 'secret.md': 'TOP SECRET', 'a.py': '', 'b.py': '', 'package.json': JSON.stringify({ scripts: { test: 'leak' } }) });
    const root = repo({ 'main.ts': '', 'docs/real-claude.md': 'inside target' });
    symlinkSync('/etc/passwd', join(root, 'AGENTS.md'));
    symlinkSync(join(outside, 'secret.md'), join(root, 'GEMINI.md'));
    symlinkSync('docs/real-claude.md', join(root, 'CLAUDE.md')); // stays inside: read
    symlinkSync(outside, join(root, 'linked')); // a directory outside: not walked
    symlinkSync(outside, join(root, '.cursor')); // a rule directory outside: not walked
    symlinkSync(join(outside, 'package.json'), join(root, 'package.json'));
    mkdirSync(join(root, 'sub'));
    symlinkSync('/etc/passwd', join(root, 'sub', 'AGENTS.md'));

    const r = await analyseRepository(opts(root, { contentMode: 'excerpt' }));
    expect(r.instructions).toEqual([
      { path: 'CLAUDE.md', profiles: ['profile_a', 'profile_c'], bytes: 13, sha256: sha('inside target'), excerpt: 'inside target', truncated: false },
    ]);
    expect(JSON.stringify(r)).not.toContain('root:');
    expect(JSON.stringify(r)).not.toContain('SECRET');
    expect(r.languages).toEqual([{ language: 'TypeScript', files: 1, share: 1 }]);
    expect(r.testCommands).toEqual([]);
  });

  it('skips fifos and other special files without blocking', async () => {
    const root = repo({ 'AGENTS.md': 'ok', 'a.go': '' });
    execFileSync('mkfifo', [join(root, 'CLAUDE.md')]);
    execFileSync('mkfifo', [join(root, 'pipe.go')]);
    execFileSync('mkfifo', [join(root, 'package.json')]);
    const r = await analyseRepository(opts(root, { contentMode: 'excerpt' }));
    expect(r.instructions!.map((i) => i.path)).toEqual(['AGENTS.md']);
    expect(r.languages).toEqual([{ language: 'Go', files: 1, share: 1 }]);
    expect(r.filesScanned).toBe(2);
  });
});

describe('skills', () => {
  it('lists directories with SKILL.md under the skill roots, using front matter when present', async () => {
    const root = repo({
      '.claude/skills/pdf/SKILL.md': '---\nname: pdf-tools\ndescription: >\n  Fill and merge PDF forms.\n  Use for any .pdf task.\nlicense: MIT\n---\n# PDF\n',
      '.claude/skills/pdf/scripts/SKILL.md': '---\nname: not-a-skill\n---\n', // inside a skill: not searched
      '.agents/skills/lint-fix/SKILL.md': '# No front matter\n',
      'skills/ops/deploy/SKILL.md': '---\nname: "deploy"\ndescription: \'Ship it: the "safe" way\'\n---\n',
      'skills/bad/SKILL.md': '---\nname: has spaces!\n---\n',
      'skills/empty-dir/README.md': '',
      'other/skills/x/SKILL.md': '---\nname: elsewhere\n---\n',
    });
    const outside = repo({ 'evil/SKILL.md': '---\nname: evil\n---\n' });
    symlinkSync(join(root, 'skills/ops/deploy'), join(root, '.agents/skills/deploy-link'));
    symlinkSync(join(outside, 'evil'), join(root, '.agents/skills/evil'));
    const r = await analyseRepository(opts(root, { include: ['skills'] }));
    expect(r.skills).toEqual([
      { name: 'pdf-tools', path: '.claude/skills/pdf', description: 'Fill and merge PDF forms. Use for any .pdf task.' },
      { name: 'deploy', path: '.agents/skills/deploy-link', description: 'Ship it: the "safe" way' },
      { name: 'lint-fix', path: '.agents/skills/lint-fix' },
      { name: 'bad', path: 'skills/bad' },
    ]);
    // The linked directory is the same real directory as skills/ops/deploy, listed once.
    expect(r.partial).toBe(false);
  });

  it('parses front matter scalars', () => {
    expect(parseFrontMatter('---\na: 1 # c\nb: |\n  x\n  y\nc: plain\n  continued\nd:\n  - list\ne: "q\\"d"\n---\nbody')).toEqual({
      a: '1',
      b: 'x\ny',
      c: 'plain continued',
      e: 'q"d',
    });
    expect(parseFrontMatter('no front matter')).toEqual({});
  });
});

describe('limits', () => {
  it('stops at maxFiles and says partial', async () => {
    const files: Record<string, string> = {};
    for (let i = 0; i < 60; i++) files[`d${i % 6}/f${i}.py`] = '';
    const root = repo(files);
    const r = await analyseRepository(opts(root, { include: ['languages'], maxFiles: 10 }));
    expect(r.partial).toBe(true);
    expect(r.filesScanned).toBe(10);
    expect(r.languages).toEqual([{ language: 'Python', files: 10, share: 1 }]);
    const full = await analyseRepository(opts(root, { include: ['languages'], maxFiles: 60 }));
    expect(full).toMatchObject({ partial: false, filesScanned: 60 });
  });

  it('streams a huge directory instead of reading it whole, with the same counts', async (t) => {
    const root = repo({ 'small/a.rs': '' });
    mkdirSync(join(root, 'huge'));
    // Long names make the directory large (ext4: ~8 bytes + name per entry) with few files.
    const pad = 'x'.repeat(200);
    execFileSync('sh', ['-c', `cd huge && seq -f "${pad}_%06g.py" 1 6000 | xargs touch`], { cwd: root });
    if (statSync(join(root, 'huge')).size <= OVERVIEW_LIMITS.readWholeDirBytes) t.skip(); // filesystem reports no dir size
    const r = await analyseRepository(opts(root, { include: ['languages'], deadlineMs: 60_000 }));
    expect(r).toMatchObject({ partial: false, filesScanned: 6001 });
    expect(r.languages).toEqual([
      { language: 'Python', files: 6000, share: 1 },
      { language: 'Rust', files: 1, share: 0 },
    ]);
    const capped = await analyseRepository(opts(root, { include: ['languages'], maxFiles: 1000, deadlineMs: 60_000 }));
    expect(capped).toMatchObject({ partial: true, filesScanned: 1000 });
  });

  it('stops at the deadline and says partial, still answering root instruction files and test commands', async () => {
    const root = repo({ 'a.py': '', 'AGENTS.md': 'x', 'go.mod': 'module x' });
    const r = await analyseRepository(opts(root, { deadlineMs: 0 }));
    expect(r.partial).toBe(true);
    expect(r.instructions!.map((i) => i.path)).toEqual(['AGENTS.md']);
    expect(r.testCommands).toEqual([{ command: 'go test ./...', source: 'go.mod', kind: 'go' }]);
  });

  it('refuses invalid options', async () => {
    const root = tmp();
    const bad: Array<Partial<OverviewOptions>> = [
      { maxBytes: 100 },
      { maxBytes: 131073 },
      { root: 'relative/path' },
      { clientProfile: 'profile_e' as ClientProfile },
      { include: ['everything' as 'skills'] },
      { contentMode: 'full' as 'none' },
      { maxFiles: 0 },
    ];
    for (const over of bad) {
      await expect(analyseRepository(opts(root, over))).rejects.toBeInstanceOf(DaemonError);
    }
    await expect(analyseRepository(opts(join(root, 'missing')))).rejects.toMatchObject({ code: 'NOT_FOUND' });
  });
});
