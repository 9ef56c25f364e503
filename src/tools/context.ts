import type { WorkspaceService } from '../services/workspaces/index.js';
import type { FileService } from '../services/files.js';
import type { CommandService } from '../services/commands/index.js';
import type { GitService } from '../services/git/index.js';
import type { ModelService } from '../services/models/index.js';
import type { ModelCatalog } from '../services/models/index.js';
import type { ConnectionChecks } from '../services/models/index.js';
import type { SpendService } from '../services/models/index.js';
import type { GatewayClient } from '../services/models/index.js';
import type { ApprovalService } from '../services/approvals.js';
import type { PackageService } from '../services/packages/index.js';
import type { RepoHostService } from '../services/repohost/index.js';
import type { ExtensionService } from '../services/extensions/index.js';
import type { AgentService } from '../services/agents/index.js';
import type { MemoryService } from '../services/memories.js';
import type { KnowledgeService } from '../services/knowledge/index.js';
import type { ArtifactService } from '../services/artifacts.js';
import type { CheckpointService } from '../services/checkpoints.js';
import type { PreviewService } from '../services/previews/index.js';
import type { CodeIntelService } from '../services/code-intel/index.js';

/**
 * The services a tool handler may call: nothing else. No database handle, no secret box, no
 * configuration: "tools never touch the store" is checked by the compiler. A new domain adds its
 * service here (and to the App, which satisfies this interface).
 */
export interface ToolServices {
  readonly workspaces: WorkspaceService;
  readonly files: FileService;
  readonly commands: CommandService;
  readonly git: GitService;
  readonly models: ModelService;
  readonly modelCatalog: ModelCatalog;
  readonly modelChecks: ConnectionChecks;
  readonly spend: SpendService;
  readonly gateway: GatewayClient;
  readonly approvals: ApprovalService;
  readonly packages: PackageService;
  readonly repohost: RepoHostService;
  /** Repository extensions: skills, hooks, deployment targets (issue #19). */
  readonly extensions: ExtensionService;
  readonly agents: AgentService;
  readonly memories: MemoryService;
  readonly knowledge: KnowledgeService;
  readonly artifacts: ArtifactService;
  /** Workspace checkpoints and forks (issue #33, beyond the spec). */
  readonly checkpoints: CheckpointService;
  /** Preview URLs (issue #33 item 4, beyond the spec). */
  readonly previews: PreviewService;
  /** Code intelligence by language servers (issue #44, beyond the spec). */
  readonly codeIntel: CodeIntelService;
}

export type { Actor } from '../services/instance/index.js';
import type { CallerGrant } from '../core/caller.js';
import type { ToolsetSession } from '../core/toolsets.js';
import type { Actor } from '../services/instance/index.js';

/** What a tool handler gets besides its validated arguments. */
export interface ToolContext {
  /** The services the handler may call. */
  services: ToolServices;
  /** The single owner principal every record is bound to. */
  owner: string;
  /** Who is acting, for audit: 'mcp' for MCP calls. */
  actor: Actor;
  /** Identifies the authenticating bearer token (never the token itself). */
  principal: string;
  /** Aborts when the client goes away or cancels. */
  signal: AbortSignal;
  /** Reports progress on long work (sent as MCP progress notifications when the client asked). */
  progress: (progress: number, total?: number, message?: string) => void;
  /**
   * Milestones of long work as MCP log notifications (sent only when the client asked with
   * logging/setLevel); e.g. ctx.log('info', 'task t_1 finished', { taskId, exitCode }).
   */
  log: (level: 'debug' | 'info' | 'notice' | 'warning' | 'error', message: string, data?: Record<string, unknown>) => void;
  /**
   * The resolved workspace of a tool declared with `workspace: 'optional' | 'required'`: the
   * given workspaceId, or the caller's active workspace. Reading it on a tool that declares no
   * workspace is a programming error.
   */
  readonly workspace: string;
  /**
   * The given workspaceId, else the caller's active workspace, else undefined (never throws): for
   * tools declared with `workspaceLazy`, whose services decide per call whether one is needed.
   */
  readonly workspaceIfAny: string | undefined;
  /** Resolves an omitted workspaceId to the caller's active workspace (for tools that need one only sometimes). */
  workspaceId: (given: string | undefined) => string;
  /** The caller's active workspace, if any (for tools where a workspace only narrows the answer). */
  activeWorkspace: () => string | undefined;
  /** What the caller may do (toolsets, read-only, an agent's operations): binds what it sets in motion. */
  caller: CallerGrant;
  /** Where a command's output goes as it comes, when the call keeps a log (a call run as an MCP task); absent otherwise. */
  output?: (chunk: Buffer) => void;
  /** The dynamic mode of the MCP connection the call came on (src/mcp/dynamic-toolsets.ts); absent outside MCP. */
  toolsets?: ToolsetSession;
}
