/**
 * The narrow interface the git tools and the workspace lifecycle call to fire repository hooks
 * (implemented by HookService, src/services/extensions/hooks.ts). It never throws: a failure to
 * read the manifest is reported in the result, and only `failed` (a pre_commit hook that did not
 * exit 0) stops the caller.
 */
export type FiredEvent = 'on_workspace_open' | 'post_checkout' | 'pre_commit' | 'post_commit';

export interface HookRunRecord {
  name: string;
  event: string;
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  durationMs: number;
  stdout: string;
  stderr: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
}

export interface HookFiring {
  event: FiredEvent;
  /** Hooks run, in manifest order (a failing pre_commit hook ends the run). */
  ran: HookRunRecord[];
  /** The first hook that did not exit 0, if any. */
  failed: HookRunRecord | null;
  /** With `failed`: one line saying which hook failed how, and the tail of its output. */
  message?: string;
  /** Why nothing ran although an activation exists (e.g. the manifest changed since activation). */
  skipped?: string;
}

export interface HookRunner {
  /** Runs the activated hooks of one event; undefined when nothing is activated for it. */
  fire(workspaceId: string, event: FiredEvent, signal?: AbortSignal): Promise<HookFiring | undefined>;
  /** After workspace_open: records the workspace's skill configuration and fires on_workspace_open. */
  opened(workspaceId: string, a: { repositoryUrl: string; skillSets: unknown[]; skillOverrides: Record<string, unknown> }, signal?: AbortSignal): Promise<HookFiring | undefined>;
}
