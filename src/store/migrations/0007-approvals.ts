import type { Migration } from '../migrations.js';

/**
 * Approvals get their own owner (services/approvals) and kinds: privileged commands, package
 * plans, skill scripts. The subject's full text is kept (no preview cut), with its digest.
 */
export const m0007: Migration = {
  version: 7,
  name: 'approvals with kinds',
  sql: `
    ALTER TABLE approvals ADD COLUMN kind TEXT NOT NULL DEFAULT 'privileged_command';
    ALTER TABLE approvals ADD COLUMN subject_text TEXT;
    ALTER TABLE approvals ADD COLUMN details_json TEXT;
    ALTER TABLE approvals ADD COLUMN requested_by TEXT;
    ALTER TABLE approvals ADD COLUMN decided_by TEXT;
    UPDATE approvals SET subject_text = command_preview WHERE subject_text IS NULL;
    CREATE INDEX approvals_pending ON approvals(kind, workspace_id, command_sha256) WHERE state = 'pending';
  `,
};
