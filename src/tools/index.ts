/** The whole catalog: every tool of the spec, in spec order, then the tools beyond it (their own toolsets). */
import type { AnyToolDef } from './define.js';
import { tools as workspace } from './workspaces.js';
import { tools as files } from './files.js';
import { tools as exec } from './commands.js';
import { tools as packages } from './packages.js';
import { tools as sessions } from './terminals.js';
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

export const CATALOG: AnyToolDef[] = [
  ...workspace,
  ...files,
  ...exec,
  ...packages,
  ...sessions,
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
] as AnyToolDef[];

/** Tools that are not among the spec's 107 (docs/STATUS.md marks their domains "beyond the spec"). */
/** The tools beyond the spec's 107: every tool of a domain named "... (beyond the spec)". */
export const BEYOND_SPEC_TOOLS: string[] = CATALOG.filter((t) => t.domain.endsWith('(beyond the spec)')).map((t) => t.name);
