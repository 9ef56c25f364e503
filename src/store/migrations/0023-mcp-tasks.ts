import type { Migration } from '../migrations.js';

/**
 * Long calls as MCP tasks (issue #32 item 2, docs/mcp-tasks.md): a tool call a client asked to run
 * as a task is an operation (services/commands owns the table) that records who started it and
 * under which grant, and keeps the call's result, its protocol error, the input it waits for (an
 * owner approval opened inside the client) and when it last changed. Operations from exec_run and
 * bash with async keep NULL in every new column.
 */
export const m0023: Migration = {
  version: 23,
  name: 'operations: tool calls run as MCP tasks',
  sql: `
    ALTER TABLE operations ADD COLUMN principal TEXT;
    ALTER TABLE operations ADD COLUMN binding_json TEXT;
    ALTER TABLE operations ADD COLUMN result_json TEXT;
    ALTER TABLE operations ADD COLUMN error_json TEXT;
    ALTER TABLE operations ADD COLUMN input_json TEXT;
    ALTER TABLE operations ADD COLUMN status_message TEXT;
    ALTER TABLE operations ADD COLUMN updated_at TEXT;
    ALTER TABLE operations ADD COLUMN ttl_ms INTEGER;
    CREATE INDEX operations_principal ON operations(principal, created_at, id) WHERE principal IS NOT NULL;
  `,
};
