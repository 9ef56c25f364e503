/**
 * Repository overview for workspace_context (and agent_spawn's repositoryContext): languages, test
 * commands, agent instruction files chosen by client profile, and repository skills.
 *
 * Runs inside the sandbox as the workspace user with root = /workspace, as part of the daemon, so it
 * imports node built-ins and sibling files only. The repository is untrusted input:
 *
 *  - every path is walked by descriptor, as the file methods walk (access.ts, ../files/confinement.ts):
 *    one component at a time from an open descriptor of the root with O_NOFOLLOW; symlinks are never
 *    followed while walking; an instruction file, marker file or skill directory that is a symlink
 *    is used only when its target stays under the root (verified on the opened descriptor);
 *  - files are opened with O_NOFOLLOW | O_NONBLOCK and checked with fstat, so devices, fifos and
 *    sockets are skipped and never block;
 *  - instruction files are hashed by streaming and only the excerpt's bytes are kept in memory;
 *    config files are read up to a fixed cap;
 *  - the walk is iterative (breadth first, opendir) and stops at maxFiles or the deadline, in which
 *    case the result says partial: true.
 *
 * Modules: rules.ts (result types re-exported from protocol.ts, profiles, limits, languages),
 * access.ts (descriptor access), walk.ts, gitignore.ts, instructions.ts, test-commands.ts,
 * skills.ts. The rules are documented in docs/workspace-context.md; keep the two in step.
 */
import { closeSync } from 'node:fs';
import path from 'node:path';
import { Confinement } from '../files/confinement.js';
import { DaemonError } from '../protocol.js';
import { CONCRETE_PROFILES, ALL_SECTIONS, OVERVIEW_LIMITS, type ConcreteProfile, type OverviewOptions, type LanguageShare, type RepositoryOverview, type Ctx, type ValidOptions } from './rules.js';
import { parseGitignore } from './gitignore.js';
import { readText } from './access.js';
import { mainWalk, summariseLanguages } from './walk.js';
import { planPatterns, collectInstructions } from './instructions.js';
import { detectTestCommands } from './test-commands.js';
import { discoverSkills } from './skills.js';

export * from './rules.js';
export { compileGlob, globToRegExp } from '../glob.js';
export { parseGitignore } from './gitignore.js';
export { justRecipes, makeTargets, taskfileTasks } from './test-commands.js';
export { SKILL_ROOTS, parseFrontMatter } from './skills.js';

// ---------------------------------------------------------------------------------------------
// Entry point
// ---------------------------------------------------------------------------------------------


export async function analyseRepository(opts: OverviewOptions): Promise<RepositoryOverview> {
  const started = Date.now();
  const options = validate(opts);
  const include = new Set(options.include);

  // The root is the one path taken as given (the daemon's own workspace root); everything under
  // it is walked by descriptor from it (access.ts).
  let c: Confinement;
  let rootFd: number;
  try {
    c = new Confinement(options.root);
    rootFd = c.openRoot();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOTDIR') throw new DaemonError('FAILED_PRECONDITION', `repository root ${options.root} is not a directory`);
    throw new DaemonError('NOT_FOUND', `repository root ${options.root} does not exist`);
  }
  try {
    return await analyse({ c, rootFd, deadline: started + options.deadlineMs, partial: false }, options, include);
  } finally {
    closeSync(rootFd);
  }
}

async function analyse(ctx: Ctx, options: ValidOptions, include: Set<string>): Promise<RepositoryOverview> {
  const wantInstructions = include.has('instructions');
  const selected = options.clientProfile === 'all' ? CONCRETE_PROFILES : [options.clientProfile];
  const plan = wantInstructions ? planPatterns(selected) : null;
  const candidates = new Set<string>();

  let filesScanned = 0;
  let languages: LanguageShare[] | undefined;
  if (include.has('languages') || (plan && (plan.nestedNames.size > 0 || plan.general.length > 0))) {
    const rules = parseGitignore((await readText(ctx, '.gitignore', OVERVIEW_LIMITS.gitignoreReadBytes)) ?? '');
    const walk = await mainWalk(ctx, {
      maxFiles: options.maxFiles,
      ignore: rules,
      countLanguages: include.has('languages'),
      onCandidate: plan ? (rel, name) => {
        if (plan.nestedNames.has(name) || plan.general.some((re) => re.test(rel))) candidates.add(rel);
      } : undefined,
    });
    filesScanned = walk.filesScanned;
    if (include.has('languages')) languages = summariseLanguages(walk.counts, walk.headers);
  }

  const result: RepositoryOverview = { partial: false, filesScanned };
  if (languages) result.languages = languages;
  if (include.has('test_commands')) result.testCommands = await detectTestCommands(ctx);
  if (plan) result.instructions = await collectInstructions(ctx, plan, candidates, selected, options);
  if (include.has('skills')) result.skills = await discoverSkills(ctx);
  result.partial = ctx.partial;
  return result;
}


function validate(opts: OverviewOptions): ValidOptions {
  const bad = (message: string): never => {
    throw new DaemonError('INVALID_ARGUMENT', message);
  };
  if (!opts || typeof opts !== 'object') bad('options must be an object');
  if (typeof opts.root !== 'string' || !path.isAbsolute(opts.root)) bad('root must be an absolute path');
  if (opts.clientProfile !== 'all' && !CONCRETE_PROFILES.includes(opts.clientProfile as ConcreteProfile)) {
    bad(`clientProfile must be one of all, ${CONCRETE_PROFILES.join(', ')}`);
  }
  if (!Array.isArray(opts.include) || opts.include.some((s) => !ALL_SECTIONS.includes(s))) {
    bad(`include must be an array of ${ALL_SECTIONS.join(', ')}`);
  }
  if (opts.contentMode !== 'none' && opts.contentMode !== 'excerpt') bad('contentMode must be none or excerpt');
  const intIn = (v: unknown, min: number, max: number): boolean => Number.isInteger(v) && (v as number) >= min && (v as number) <= max;
  if (!intIn(opts.maxBytes, OVERVIEW_LIMITS.minMaxBytes, OVERVIEW_LIMITS.maxMaxBytes)) {
    bad(`maxBytes must be an integer from ${OVERVIEW_LIMITS.minMaxBytes} to ${OVERVIEW_LIMITS.maxMaxBytes}`);
  }
  if (opts.maxFiles !== undefined && !intIn(opts.maxFiles, 1, 100_000_000)) bad('maxFiles must be a positive integer');
  if (opts.deadlineMs !== undefined && !intIn(opts.deadlineMs, 0, 600_000)) bad('deadlineMs must be an integer from 0 to 600000');
  return {
    root: opts.root,
    clientProfile: opts.clientProfile,
    include: [...new Set(opts.include)],
    contentMode: opts.contentMode,
    maxBytes: opts.maxBytes,
    maxFiles: opts.maxFiles ?? OVERVIEW_LIMITS.defaultMaxFiles,
    deadlineMs: opts.deadlineMs ?? OVERVIEW_LIMITS.defaultDeadlineMs,
  };
}
