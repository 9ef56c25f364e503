/** Per-caller preferences (the active workspace). A caller is one bearer token. */
import type { DB } from '../../store/db.js';
import { nowIso } from '../../core/clock.js';

export class PrincipalState {
  constructor(private readonly db: DB) {}

  activeWorkspace(principal: string): string | null {
    return (this.db.prepare('SELECT active_workspace_id FROM principal_state WHERE principal = ?').pluck().get(principal) as string | null) ?? null;
  }

  setActiveWorkspace(principal: string, workspaceId: string | null): void {
    this.db
      .prepare(
        `INSERT INTO principal_state (principal, active_workspace_id, updated_at) VALUES (?, ?, ?)
         ON CONFLICT(principal) DO UPDATE SET active_workspace_id = excluded.active_workspace_id, updated_at = excluded.updated_at`,
      )
      .run(principal, workspaceId, nowIso());
  }

  /** Clears the active pointer wherever it names a workspace that is gone. */
  forgetWorkspace(workspaceId: string): void {
    this.db.prepare('UPDATE principal_state SET active_workspace_id = NULL, updated_at = ? WHERE active_workspace_id = ?').run(nowIso(), workspaceId);
  }
}
