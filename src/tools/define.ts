/**
 * The tool pattern: every tool is one declarative definition; the registry (src/mcp/registry.ts)
 * does the rest alike for all of them (annotations, validation, owner binding, workspace
 * resolution, idempotent replay, audit, errors).
 */
import type { z } from 'zod';
import type { ToolContext } from './context.js';

export type Badge = 'readOnly' | 'destructive' | 'idempotent' | 'openWorld';

/** Which issue builds a tool; a definition without `run` answers NOT_IMPLEMENTED naming it. */
export type Tracking =
  | '#2 foundation'
  | '#3 workspaces'
  | '#4 files'
  | '#5 commands'
  | '#6 git'
  | '#7 model control plane'
  | '#8 gateway and spend'
  | '#20 packages'
  | 'sessions and tasks'
  | 'repository host'
  | 'repository extensions'
  | 'knowledge store'
  | 'artifacts'
  | 'coding subagents'
  | '#33 checkpoints and forks'
  | 'preview URLs'
  | '#44 code intelligence'
  | '#45 tool discovery';

export interface ToolDef<S extends z.ZodRawShape = z.ZodRawShape> {
  /** Exactly the spec's name. */
  name: string;
  /** The spec section the tool belongs to (used by docs/STATUS.md). */
  domain: string;
  /** Badges as the spec gives them; an absent badge is published as an explicit false hint. */
  badges: Badge[];
  /** Written for a model: what it does, when to use it, its limits. */
  description: string;
  /**
   * The workspace parameter, declared once: 'optional' adds `workspaceId` (optional WSID, the
   * caller's active workspace when omitted) and 'required' adds it as required; the registry
   * resolves it before the handler runs and hands it over as `ctx.workspace`. Tools that need a
   * workspace only sometimes (bash's toolbox target) declare the field in `input` themselves.
   */
  workspace?: 'optional' | 'required';
  /**
   * With `workspace: 'optional'`: the registry does not resolve the workspace before the handler
   * runs; the handler passes `ctx.workspaceIfAny` and the service refuses (FAILED_PRECONDITION on
   * workspaceId) only the calls that need one (the owner scope of knowledge and memory notes needs
   * none: docs/knowledge.md "Workspaces"). The published schema is the same.
   */
  workspaceLazy?: true;
  /** Input fields; the registry wraps them in a strict object (after workspaceId, when declared). */
  input: S;
  /**
   * Fields the spec retired: sending one is refused with this message before validation
   * (e.g. workspace_open's networkMode, which points to networkProfile).
   */
  retired?: Record<string, string>;
  /** Cross-field rules zod cannot publish; return a problem as { field, message } or nothing. */
  check?: (args: z.output<z.ZodObject<S>>) => { field: string; message: string } | undefined;
  /**
   * 'key': the registry replays by args.idempotencyKey (same input, first result, replayed:true;
   * different input, CONFLICT) for 24 hours.
   */
  idempotency?: 'key';
  /**
   * The tool runs commands in the workspace indirectly (a hook, a skill script, a deployment, a
   * task, a coding session's input): the registry refuses it to a caller that could not run the
   * same command with exec_run (docs/access.md "What a caller sets in motion").
   */
  runsCommands?: true;
  /** The issue that builds the tool; shown in NOT_IMPLEMENTED errors and docs/STATUS.md. */
  tracking: Tracking;
  /** Present once the tool is built. Returns the structuredContent object. */
  run?: (args: z.output<z.ZodObject<S>>, ctx: ToolContext) => Promise<Record<string, unknown>> | Record<string, unknown>;
}

export function defineTool<S extends z.ZodRawShape>(def: ToolDef<S>): ToolDef<S> {
  return def;
}

/** Erased form stored in the catalog. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyToolDef = ToolDef<any>;
