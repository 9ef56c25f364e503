/** Test commands from manifests, lockfiles and task runners. */
import { OVERVIEW_LIMITS, type TestCommand, type Ctx } from './rules.js';
import { dirEntries, readText, isFileInside, isDirInside } from './access.js';

// ---------------------------------------------------------------------------------------------
// Test commands
// ---------------------------------------------------------------------------------------------

export const NPM_PLACEHOLDER = /no test specified/i;
export const PACKAGE_MANAGERS = ['npm', 'pnpm', 'yarn', 'bun'] as const;
export type PackageManager = (typeof PACKAGE_MANAGERS)[number];
export const LOCKFILES: Array<[string, PackageManager]> = [
  ['pnpm-lock.yaml', 'pnpm'],
  ['yarn.lock', 'yarn'],
  ['bun.lock', 'bun'],
  ['bun.lockb', 'bun'],
  ['package-lock.json', 'npm'],
  ['npm-shrinkwrap.json', 'npm'],
];
export const MAKE_TARGET_LIMIT = 10;

export function scriptCommand(pm: PackageManager, script: string): string {
  if (script === 'test' && pm !== 'bun') return `${pm} test`; // `bun test` is bun's own runner, not the script
  return `${pm} run ${script}`;
}

export function parseJson(text: string | null): unknown {
  if (text === null) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** JSON with comments and trailing commas (deno.jsonc), best effort. */
export function parseJsonc(text: string | null): unknown {
  if (text === null) return undefined;
  let out = '';
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (inString) {
      out += c;
      if (c === '\\') out += text[++i] ?? '';
      else if (c === '"') inString = false;
    } else if (c === '"') {
      inString = true;
      out += c;
    } else if (c === '/' && text[i + 1] === '/') {
      while (i < text.length && text[i] !== '\n') i++;
      out += '\n';
    } else if (c === '/' && text[i + 1] === '*') {
      const end = text.indexOf('*/', i + 2);
      i = end < 0 ? text.length : end + 1;
    } else out += c;
  }
  return parseJson(out.replace(/,(\s*[}\]])/g, '$1'));
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Target names defined in a Makefile, in order of appearance. */
export function makeTargets(text: string): string[] {
  const targets: string[] = [];
  for (const line of text.split(/\r?\n/)) {
    if (line === '' || /^[\s#]/.test(line)) continue;
    const m = /^([A-Za-z0-9_.\-/ ]+?)\s*(::?)(.*)$/.exec(line);
    if (!m) continue;
    if (m[3]!.startsWith('=') || (m[2] === ':' && m[3]!.startsWith(':='))) continue; // := ::= assignments
    for (const t of m[1]!.split(/\s+/)) if (t && !t.startsWith('.') && !targets.includes(t)) targets.push(t);
  }
  return targets;
}

/** Recipe names in a justfile. */
export function justRecipes(text: string): string[] {
  const recipes: string[] = [];
  for (const line of text.split(/\r?\n/)) {
    if (/^(set|alias|export|import|mod)\s/.test(line)) continue;
    const m = /^@?([A-Za-z_][A-Za-z0-9_-]*)(?:\s+[^:=]*)?:(?!=)/.exec(line);
    if (m && !recipes.includes(m[1]!)) recipes.push(m[1]!);
  }
  return recipes;
}

/** Task names under the top-level `tasks:` mapping of a Taskfile. */
export function taskfileTasks(text: string): string[] {
  const tasks: string[] = [];
  const lines = text.split(/\r?\n/);
  const start = lines.findIndex((l) => /^tasks:\s*(?:#.*)?$/.test(l));
  if (start < 0) return tasks;
  let indent = -1;
  for (const line of lines.slice(start + 1)) {
    if (line.trim() === '' || /^\s*#/.test(line)) continue;
    const lead = line.length - line.trimStart().length;
    if (lead === 0) break; // next top-level key
    if (indent < 0) indent = lead;
    if (lead !== indent) continue;
    const m = /^\s*(['"]?)([A-Za-z0-9_:.-]+)\1\s*:/.exec(line);
    if (m && !tasks.includes(m[2]!)) tasks.push(m[2]!);
  }
  return tasks;
}

export function isTestTarget(name: string): boolean {
  return name === 'test' || name === 'tests' || name === 'check' || /^test[-_:]/.test(name);
}

export async function detectTestCommands(ctx: Ctx): Promise<TestCommand[]> {
  const out: TestCommand[] = [];
  const add = (command: string, source: string, kind: string) => {
    if (!out.some((c) => c.command === command)) out.push({ command, source, kind });
  };
  const fileCache = new Map<string, boolean>();
  const has = async (rel: string) => {
    let v = fileCache.get(rel);
    if (v === undefined) fileCache.set(rel, (v = await isFileInside(ctx, rel)));
    return v;
  };
  const firstOf = async (...rels: string[]) => {
    for (const r of rels) if (await has(r)) return r;
    return null;
  };

  // package.json scripts
  const pkg = parseJson(await readText(ctx, 'package.json'));
  if (isRecord(pkg) && isRecord(pkg.scripts)) {
    let pm: PackageManager | null = null;
    if (typeof pkg.packageManager === 'string') {
      const name = pkg.packageManager.split('@')[0] as PackageManager;
      if (PACKAGE_MANAGERS.includes(name)) pm = name;
    }
    if (!pm) for (const [lock, manager] of LOCKFILES) if (await has(lock)) { pm = manager; break; }
    pm ??= 'npm';
    for (const [script, body] of Object.entries(pkg.scripts)) {
      if (typeof body !== 'string' || (script !== 'test' && !script.startsWith('test:'))) continue;
      if (script === 'test' && NPM_PLACEHOLDER.test(body)) continue;
      add(scriptCommand(pm, script), `package.json scripts.${script}`, pm);
    }
  }

  // deno
  const denoFile = await firstOf('deno.json', 'deno.jsonc');
  if (denoFile) {
    const deno = parseJsonc(await readText(ctx, denoFile));
    if (isRecord(deno) && isRecord(deno.tasks) && deno.tasks.test !== undefined) add('deno task test', `${denoFile} tasks.test`, 'deno');
    else add('deno test', denoFile, 'deno');
  }

  // Makefile
  const makefile = await firstOf('GNUmakefile', 'makefile', 'Makefile');
  if (makefile) {
    const text = await readText(ctx, makefile);
    const targets = text ? makeTargets(text).filter(isTestTarget).slice(0, MAKE_TARGET_LIMIT) : [];
    for (const t of targets) add(`make ${t}`, `${makefile} target ${t}`, 'make');
  }

  // justfile
  const justfile = await firstOf('justfile', 'Justfile', '.justfile');
  if (justfile) {
    const text = await readText(ctx, justfile);
    for (const r of (text ? justRecipes(text) : []).filter(isTestTarget).slice(0, MAKE_TARGET_LIMIT)) {
      add(`just ${r}`, `${justfile} recipe ${r}`, 'just');
    }
  }

  // Taskfile (go-task)
  const taskfile = await firstOf('Taskfile.yml', 'Taskfile.yaml', 'taskfile.yml', 'taskfile.yaml');
  if (taskfile) {
    for (const t of taskfileTasks((await readText(ctx, taskfile)) ?? '').filter(isTestTarget).slice(0, MAKE_TARGET_LIMIT)) {
      add(`task ${t}`, `${taskfile} tasks.${t}`, 'task');
    }
  }

  // Python
  const pyRunner = (await has('uv.lock')) ? 'uv run ' : (await has('poetry.lock')) ? 'poetry run ' : (await has('pdm.lock')) ? 'pdm run ' : (await has('Pipfile.lock')) ? 'pipenv run ' : '';
  const pyproject = (await readText(ctx, 'pyproject.toml')) ?? '';
  const toxIni = (await readText(ctx, 'tox.ini')) ?? '';
  let pytestSource: string | null = null;
  if (await has('pytest.ini')) pytestSource = 'pytest.ini';
  else if (/^\[tool\.pytest(?:\.ini_options)?\]/m.test(pyproject)) pytestSource = `pyproject.toml [${/^\[(tool\.pytest(?:\.ini_options)?)\]/m.exec(pyproject)![1]}]`;
  else if (/^\[pytest\]/m.test(toxIni)) pytestSource = 'tox.ini [pytest]';
  else if (/^\[tool:pytest\]/m.test((await readText(ctx, 'setup.cfg')) ?? '')) pytestSource = 'setup.cfg [tool:pytest]';
  else {
    const conftest = await firstOf('conftest.py', 'tests/conftest.py', 'test/conftest.py');
    if (conftest) pytestSource = conftest;
  }
  if (pytestSource) add(`${pyRunner}pytest`, pytestSource, 'pytest');
  if (/^\[(?:tox|testenv)[\]:]/m.test(toxIni)) add('tox', 'tox.ini', 'tox');
  else if (/^\[tool\.tox\]/m.test(pyproject)) add('tox', 'pyproject.toml [tool.tox]', 'tox');
  else if (await has('tox.toml')) add('tox', 'tox.toml', 'tox');
  if (await has('noxfile.py')) add('nox', 'noxfile.py', 'nox');

  // Rust, Go
  const cargo = await readText(ctx, 'Cargo.toml');
  if (cargo !== null) add(/^\[workspace\]/m.test(cargo) ? 'cargo test --workspace' : 'cargo test', 'Cargo.toml', 'cargo');
  if (await has('go.mod')) add('go test ./...', 'go.mod', 'go');

  // JVM
  if (await has('pom.xml')) add((await has('mvnw')) ? './mvnw test' : 'mvn test', 'pom.xml', 'maven');
  const gradle = await firstOf('build.gradle.kts', 'build.gradle', 'settings.gradle.kts', 'settings.gradle');
  if (gradle) add((await has('gradlew')) ? './gradlew test' : 'gradle test', gradle, 'gradle');

  // Ruby
  const gemfile = await has('Gemfile');
  const bundle = gemfile ? 'bundle exec ' : '';
  const gemText = gemfile ? ((await readText(ctx, 'Gemfile')) ?? '') : '';
  const specDir = await isDirInside(ctx, 'spec');
  if ((await has('.rspec')) || (gemfile && specDir) || /['"]rspec(?:-rails)?['"]/.test(gemText)) {
    add(`${bundle}rspec`, (await has('.rspec')) ? '.rspec' : specDir ? 'spec/' : 'Gemfile rspec', 'rspec');
  }
  const rakefile = await firstOf('Rakefile', 'rakefile', 'Rakefile.rb');
  if (rakefile) {
    const text = (await readText(ctx, rakefile)) ?? '';
    if (/Rails\.application/.test(text) && (await has('bin/rails'))) add('bin/rails test', `${rakefile} (Rails)`, 'rails');
    else if (/TestTask|task\s*\(?\s*:test\b|task\s*\(?\s*['"]test['"]/.test(text) || (await isDirInside(ctx, 'test'))) {
      add(`${bundle}rake test`, rakefile, 'rake');
    }
  }

  // PHP
  const composer = parseJson(await readText(ctx, 'composer.json'));
  if (isRecord(composer) && isRecord(composer.scripts) && composer.scripts.test !== undefined) add('composer test', 'composer.json scripts.test', 'composer');
  const phpunit = await firstOf('phpunit.xml', 'phpunit.xml.dist', 'phpunit.dist.xml');
  if (phpunit) add('vendor/bin/phpunit', phpunit, 'phpunit');

  // Elixir, Swift, .NET, CMake
  if (await has('mix.exs')) add('mix test', 'mix.exs', 'mix');
  if (await has('Package.swift')) add('swift test', 'Package.swift', 'swift');
  const dotnet = await rootFileMatching(ctx, /\.(?:sln|slnx|csproj|fsproj|vbproj)$/);
  if (dotnet) add('dotnet test', dotnet, 'dotnet');
  const cmake = await readText(ctx, 'CMakeLists.txt');
  if (cmake !== null && /\b(?:enable_testing|add_test)\s*\(/i.test(cmake)) add('ctest --test-dir build', 'CMakeLists.txt', 'ctest');

  return out;
}

/** First regular file (sorted by name) directly in the root whose name matches. */
export async function rootFileMatching(ctx: Ctx, re: RegExp): Promise<string | null> {
  const names: string[] = [];
  let n = 0;
  for await (const ent of dirEntries(ctx.rootFd, 128)) {
    if (++n > OVERVIEW_LIMITS.subtreeMaxEntries) break;
    if (ent.isFile() && re.test(ent.name)) names.push(ent.name);
  }
  names.sort();
  return names[0] ?? null;
}
