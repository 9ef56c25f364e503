/**
 * Who set a call in motion, and what they may do (issue #31 item 2; docs/access.md "What a caller
 * sets in motion"). A bearer token or OAuth grant narrowed to toolsets or to read-only, and an
 * agent limited to its proxyOperations (under the access of whoever spawned its tree), are bound
 * by the same rule on every path: a tool they call directly, an agent they spawn (its operations),
 * a message or cancel they send to an agent, and the commands that a tool runs indirectly (hooks,
 * skills, deployments, tasks). The registry builds one CallerGrant per call and runs the call in
 * its scope, so work the call reaches (a hook that fires inside git_commit) can ask who caused it.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { accessProblem, FULL_ACCESS, type Access, type ToolFacts } from './toolsets.js';

/** The tool whose use stands for "may run a command in the workspace". */
export const COMMAND_TOOL = 'exec_run';

export interface CallerGrant {
  /** Toolsets and read-only of the token or grant (for an agent: of whoever spawned its tree). */
  readonly access: Access;
  /** An agent's proxyOperations; null for an MCP caller. */
  readonly operations: ReadonlySet<string> | null;
  /** The agent calling, when it is one. */
  readonly agentId: string | null;
  /** Why this caller may not call `tool` directly, or null when it may. */
  problem(tool: string): string | null;
  /** Whether it could run a command with exec_run: only then may it set commands in motion. */
  readonly mayRunCommands: boolean;
  /** Everything, as the owner: not narrowed, not read-only, not an agent. */
  readonly unnarrowed: boolean;
}

/**
 * The grant of one caller. `facts` looks a tool up by name (the registry's catalog); an unknown
 * tool is never allowed.
 */
export function callerGrant(access: Access | undefined, operations: Iterable<string> | null | undefined, agentId: string | null | undefined, facts: (tool: string) => ToolFacts | undefined): CallerGrant {
  const acc = access ?? FULL_ACCESS;
  const ops = operations ? new Set(operations) : null;
  const problem = (tool: string): string | null => {
    const def = facts(tool);
    if (!def) return `${tool} is not a tool of the catalog`;
    const p = accessProblem(acc, def);
    if (p) return p;
    if (ops && !ops.has(tool)) return `${tool} is not among this agent's proxyOperations (${[...ops].join(', ') || 'none'})`;
    return null;
  };
  return {
    access: acc,
    operations: ops,
    agentId: agentId ?? null,
    problem,
    mayRunCommands: problem(COMMAND_TOOL) === null,
    unnarrowed: acc.toolsets === null && !acc.readOnly && ops === null && !agentId,
  };
}

const scope = new AsyncLocalStorage<CallerGrant>();

/** Runs `fn` with `grant` as the caller of everything it reaches. */
export function withCaller<T>(grant: CallerGrant, fn: () => T): T {
  return scope.run(grant, fn);
}

/** The caller of the work running now, or undefined outside any call (start-up, sweepers). */
export function currentCaller(): CallerGrant | undefined {
  return scope.getStore();
}

/** The rule an indirect command path names in its refusal. */
export function commandsRefusal(tool: string, grant: CallerGrant): string {
  return `${tool} runs commands in the workspace, and this caller may not run commands: ${grant.problem(COMMAND_TOOL)}; a caller never sets in motion a command it could not run with ${COMMAND_TOOL}`;
}
