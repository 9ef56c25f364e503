/**
 * The whole catalog: every tool of the spec, in spec order, then the tools beyond it (their own toolsets).
 *
 * Where a spec section lives: a tool module is named after the domain of src/services/ its tools
 * call; its end-to-end tests are test/e2e/<domain>*.test.ts (workspaces also workspace-*, lifecycle,
 * templates; commands also mcp-tasks; models also catalog, spend-overrun).
 *   Workspace lifecycle                      tools/workspaces.ts   services/workspaces/
 *   Files and code intelligence              tools/files.ts        services/files.ts
 *   Commands and shells; Sessions and tasks  tools/commands.ts     services/commands/
 *   Managed packages                         tools/packages.ts     services/packages/
 *   Git and worktrees                        tools/git.ts          services/git/
 *   Repository-host operations               tools/repohost.ts     services/repohost/
 *   Repository extensions                    tools/extensions.ts   services/extensions/
 *     (its memories_* tools)                 tools/memories.ts     services/memories.ts
 *   Knowledge store                          tools/knowledge.ts    services/knowledge/
 *   Retained artifacts                       tools/artifacts.ts    services/artifacts.ts
 *   Models and spend tools                   tools/models.ts       services/models/
 *   Coding subagents                         tools/agents.ts       services/agents/
 *   Workspace checkpoints and forks (beyond the spec; workspace_fork is the checkpoint service's)
 *                                            tools/checkpoints.ts  services/checkpoints.ts
 *   Previews (beyond the spec)               tools/previews.ts     services/previews/
 *   Tool discovery (beyond the spec)         tools/discovery.ts    (state: src/mcp/dynamic-toolsets.ts)
 */
import type { AnyToolDef } from './define.js';
import { tools as workspace } from './workspaces.js';
import { tools as files } from './files.js';
import { commandsAndShells, sessionsAndTasks } from './commands.js';
import { tools as packages } from './packages.js';
import { tools as git } from './git.js';
import { tools as repohost } from './repohost.js';
import { deploymentsAndSuggest, skillsAndHooks } from './extensions.js';
import { tools as memories } from './memories.js';
import { tools as knowledge } from './knowledge.js';
import { tools as artifacts } from './artifacts.js';
import { tools as models } from './models.js';
import { tools as agents } from './agents.js';
import { tools as checkpoints } from './checkpoints.js';
import { tools as previews } from './previews.js';
import { tools as codeIntel } from './code-intel.js';
import { tools as discovery } from './discovery.js';

export const CATALOG: AnyToolDef[] = [
  ...workspace,
  ...files,
  ...commandsAndShells,
  ...packages,
  ...sessionsAndTasks,
  ...git,
  ...repohost,
  ...skillsAndHooks,
  ...memories,
  ...deploymentsAndSuggest,
  ...knowledge,
  ...artifacts,
  ...models,
  ...agents,
  // Beyond the spec (issue #33).
  ...checkpoints,
  // Beyond the spec (issue #33): their own domains and toolsets.
  ...previews,
  // Beyond the spec (issue #44): code intelligence by language servers.
  ...codeIntel,
  // Beyond the spec (issue #45 item 2): the dynamic mode's discovery tools.
  ...discovery,
] as AnyToolDef[];

/** Tools that are not among the spec's 107 (docs/STATUS.md marks their domains "beyond the spec"). */
/** The tools beyond the spec's 107: every tool of a domain named "... (beyond the spec)". */
export const BEYOND_SPEC_TOOLS: string[] = CATALOG.filter((t) => t.domain.endsWith('(beyond the spec)')).map((t) => t.name);
