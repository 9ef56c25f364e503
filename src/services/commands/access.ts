/**
 * Who may reach an operation (issue #42 item 6; docs/access.md "Operations and tasks"). One rule
 * for both doors to the operations table: the MCP tasks/* requests (src/mcp/tasks.ts) and the
 * operation_status, operation_wait and operation_cancel tools (services/commands/runs.ts).
 *
 * - An operation started as an MCP task records its principal: only that principal reaches it.
 *   An async exec_run / bash operation records none (the service has one owner): any principal.
 * - Its tool must be one the caller may call now, under the grant it presents on this request:
 *   its token's toolsets and read-only flag, narrowed by the connection's X-MCP-Toolsets /
 *   X-MCP-Readonly, and for an agent its proxyOperations. A read-only connection so reaches no
 *   exec_run operation, a connection narrowed to other toolsets no operation of a tool outside them.
 *
 * Anything else is told the operation does not exist (its existence does not leak).
 */
import type { CallerGrant } from '../../core/caller.js';

/** The caller asking: the principal of its bearer and its grant on this request. */
export interface OperationViewer {
  principal: string;
  grant: Pick<CallerGrant, 'problem'>;
}

/** Whether `viewer` may see (and, with a tool that allows it, wait for or cancel) the operation. */
export function mayReachOperation(op: { principal: string | null; tool: string }, viewer: OperationViewer): boolean {
  if (op.principal !== null && op.principal !== viewer.principal) return false;
  return viewer.grant.problem(op.tool) === null;
}
