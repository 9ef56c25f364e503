/**
 * The application's gauges on /metrics (issue #35 item 5; names in docs/operations.md "Metrics").
 * Handed what it reads (AppMetricSources, built by the composition level: server.ts
 * appMetricSources), so it imports nothing above telemetry and core (issue #43 item 5).
 */
import { VERSION } from '../core/version.js';
import { registerCounterView, registerGauge } from './metrics.js';

type Samples = Array<{ labels: Record<string, string>; value: number }>;

/** What the application's gauges read, each read at scrape time. */
export interface AppMetricSources {
  /** Rows of a table counted by one column (workspaces by state, agents by status). */
  countBy(table: 'workspaces' | 'agents', column: string): Array<{ s: string; n: number }>;
  /** The states every scrape reports (0 when none is in it). */
  workspaceStates: readonly string[];
  agentStatuses: readonly string[];
  /** The kinds a workspace sandbox can be (sandboxKind), and the running ones: kind and how a claimed one was launched. */
  sandboxKinds: readonly string[];
  sandboxes(): Array<{ kind: string; claim?: 'warm' | 'cold' }>;
  /** Resource figures of the running workspace sandboxes (null for one that could not be read). */
  sandboxStats(): Promise<Array<{ memoryBytes: number; pids: number; cpuUsageNs: number } | null>>;
  spendWindow(window: 'day' | 'month'): { settledMicros: number; reservedMicros: number; unreconciledMicros: number };
  spendCaps(): { dailyCapMicros: number | null; monthlyCapMicros: number | null };
  login(): { checks: { ok: number; wrong: number }; refused: Record<string, number>; lockouts: { address: number; overall: number }; runningMax: number };
  /** Absent when the executor hands no descriptors off. */
  fileHandoffs?: () => { taken: number; refused: number };
  /** Code intelligence's counters: requests by server and outcome, restarts by server. */
  codeIntel(): { requests: Array<{ labels: { server: string; outcome: string }; value: number }>; restarts: Array<{ labels: { server: string }; value: number }> };
  checkpoints(): { copies: Samples; diskBytes: Samples; frozenMs: number; freezes: number; refused: Samples; stored: number; storedBytes: number };
  imagePool: { state: string; reason: string; usage(): { sizeBytes: number; usedBytes: number; hostFileBytes: number } | null | undefined };
  /** When the last successful backup finished (ISO), null when none was taken. */
  lastBackupAt(): string | null;
}

/** The application's gauges (one app per process serves /metrics). */
export function registerAppMetrics(app: AppMetricSources): void {
  const started = Date.now();
  registerGauge({ name: 'atelier_info', help: 'Build information', labelNames: ['version'], collect: () => [{ labels: { version: VERSION }, value: 1 }] });
  registerGauge({ name: 'atelier_uptime_seconds', help: 'Seconds since start', collect: () => Math.floor((Date.now() - started) / 1000) });
  const byState = (table: 'workspaces' | 'agents', column: string, known: readonly string[]) => () => {
    const rows = app.countBy(table, column);
    const out = new Map(known.map((s) => [s, 0]));
    for (const r of rows) out.set(r.s, r.n);
    return [...out].map(([state, value]) => ({ labels: { state }, value }));
  };
  registerGauge({ name: 'atelier_workspaces', help: 'Workspaces by state', labelNames: ['state'], collect: byState('workspaces', 'state', app.workspaceStates) });
  registerGauge({ name: 'atelier_agents', help: 'Agents by state', labelNames: ['state'], collect: byState('agents', 'status', app.agentStatuses) });

  // Sandbox resources, summed over the running workspace sandboxes (read from their cgroups at scrape time, cached 5 s).
  let cached: { at: number; value: Promise<{ sandboxes: number; memoryBytes: number; pids: number; cpuSeconds: number }> } | null = null;
  const sandboxTotals = () => {
    if (cached && Date.now() - cached.at < 5000) return cached.value;
    const value = (async () => {
      const stats = await app.sandboxStats();
      const ok = stats.filter((s) => s !== null);
      return {
        sandboxes: stats.length,
        memoryBytes: ok.reduce((a, s) => a + s.memoryBytes, 0),
        pids: ok.reduce((a, s) => a + s.pids, 0),
        cpuSeconds: ok.reduce((a, s) => a + s.cpuUsageNs, 0) / 1e9,
      };
    })();
    cached = { at: Date.now(), value };
    return value;
  };
  registerGauge({ name: 'atelier_sandboxes_running', help: 'Workspace sandboxes running', collect: async () => (await sandboxTotals()).sandboxes });
  // Which kind each workspace sandbox is (issue #34): executor bubblewrap (kind bubblewrap) or kubernetes (kind pod or sandbox: agent-sandbox).
  registerGauge({
    name: 'atelier_workspace_sandboxes',
    help: 'Workspace sandboxes this runner holds, by executor (bubblewrap, kubernetes) and kind (bubblewrap; pod: a Pod with a claim; sandbox: an agent-sandbox Sandbox)',
    labelNames: ['executor', 'kind'],
    collect: () => {
      const n = new Map(app.sandboxKinds.map((k) => [k, 0]));
      for (const h of app.sandboxes()) n.set(h.kind, (n.get(h.kind) ?? 0) + 1);
      return [...n].map(([k, value]) => ({ labels: { executor: k.startsWith('kubernetes-') ? 'kubernetes' : k, kind: k.replace(/^kubernetes-/, '') }, value }));
    },
  });
  // Kubernetes workspaces claimed from a SandboxWarmPool (--kube-warm-pool): warm (adopted, started before the open) or cold (the claim made it).
  registerGauge({
    name: 'atelier_workspace_sandbox_claims',
    help: 'Workspace sandboxes this runner holds that were claimed from a Kubernetes SandboxWarmPool, by launch (warm: adopted from the pool; cold: made for the claim)',
    labelNames: ['launch'],
    collect: () => {
      const n = { warm: 0, cold: 0 };
      for (const h of app.sandboxes()) if (h.claim) n[h.claim]++;
      return Object.entries(n).map(([launch, value]) => ({ labels: { launch }, value }));
    },
  });
  registerGauge({ name: 'atelier_sandbox_memory_bytes', help: 'Memory in use by all workspace sandboxes (cgroup memory.current, summed), bytes', collect: async () => (await sandboxTotals()).memoryBytes });
  registerGauge({ name: 'atelier_sandbox_pids', help: 'Processes and threads in all workspace sandboxes (cgroup pids.current, summed)', collect: async () => (await sandboxTotals()).pids });
  registerGauge({ name: 'atelier_sandbox_cpu_seconds', help: 'CPU time used by the running workspace sandboxes since they started (cgroup usage_usec, summed), seconds', collect: async () => (await sandboxTotals()).cpuSeconds });

  // Spend of the current day and month windows (UTC), micro-dollars, by state.
  registerGauge({
    name: 'atelier_spend_micros',
    help: 'Model spend of the current window (day, month; UTC) by state (settled, reserved, unreconciled), micro-dollars',
    labelNames: ['window', 'state'],
    collect: () =>
      (['day', 'month'] as const).flatMap((window) => {
        const w = app.spendWindow(window);
        return [
          { labels: { window, state: 'settled' }, value: w.settledMicros },
          { labels: { window, state: 'reserved' }, value: w.reservedMicros },
          { labels: { window, state: 'unreconciled' }, value: w.unreconciledMicros },
        ];
      }),
  });
  registerGauge({
    name: 'atelier_spend_cap_micros',
    help: 'Spend cap of the window (day, month), micro-dollars; absent when there is no cap',
    labelNames: ['window'],
    collect: () => {
      const p = app.spendCaps();
      return [
        ...(p.dailyCapMicros === null ? [] : [{ labels: { window: 'day' }, value: p.dailyCapMicros }]),
        ...(p.monthlyCapMicros === null ? [] : [{ labels: { window: 'month' }, value: p.monthlyCapMicros }]),
      ];
    },
  });

  // Password login (issue #31): the names tests and docs already use.
  const login = () => app.login();
  registerCounterView('atelier_login_password_checks_total', 'Password checks (scrypt) of the dashboard login, by result', ['outcome'], () => [
    { labels: { outcome: 'ok' }, value: login().checks.ok },
    { labels: { outcome: 'wrong' }, value: login().checks.wrong },
  ]);
  registerCounterView('atelier_login_refused_total', 'Password logins refused without a check (delay, lockout, a check from the same address running, busy)', ['reason'], () =>
    Object.entries(login().refused).map(([reason, value]) => ({ labels: { reason }, value })),
  );
  registerCounterView('atelier_login_lockouts_total', 'Password login lockouts, per address and overall', ['scope'], () => [
    { labels: { scope: 'address' }, value: login().lockouts.address },
    { labels: { scope: 'overall' }, value: login().lockouts.overall },
  ]);
  registerGauge({ name: 'atelier_login_password_checks_running_max', help: 'The most password checks that ran at once since start', collect: () => login().runningMax });
  if (app.fileHandoffs) {
    const handoffs = app.fileHandoffs;
    registerCounterView('atelier_file_handoffs_total', "files_read ranges read through the daemon's handed-off descriptor (taken), and handoffs refused or failed (read the ordinary way)", ['outcome'], () => [
      { labels: { outcome: 'taken' }, value: handoffs().taken },
      { labels: { outcome: 'refused' }, value: handoffs().refused },
    ]);
  }
  // Checkpoints and forks (issue #33): copies by operation and mode, their disk, freezes, refusals, what is kept.
  const ckpt = () => app.checkpoints();
  // Code intelligence (issue #44): requests by language server and outcome, restarts seen in the daemons' replies.
  registerCounterView('atelier_code_intel_requests_total', 'code_* tool calls by language server (none: no server) and outcome (ok, or the error code)', ['server', 'outcome'], () => app.codeIntel().requests);
  registerCounterView('atelier_code_intel_restarts_total', "Language-server restarts (after a crash or an idle stop) seen in the daemons' replies, by server", ['server'], () => app.codeIntel().restarts);
  registerCounterView('atelier_checkpoint_copies_total', 'Workspace filesystem copies by operation (checkpoint, restore, fork_checkpoint, fork_live) and mode (reflink: copy-on-write; copy: every allocated block written)', ['op', 'mode'], () => ckpt().copies);
  registerCounterView('atelier_checkpoint_copy_disk_bytes_total', 'Host disk the copies added as they were made (a full copy: every allocated block; a reflink clone: only blocks it does not share)', ['op', 'mode'], () => ckpt().diskBytes);
  registerCounterView('atelier_checkpoint_frozen_ms_total', 'Milliseconds workspaces stood frozen for checkpoints and live forks', [], () => [{ labels: {}, value: ckpt().frozenMs }]);
  registerCounterView('atelier_checkpoint_freezes_total', 'Checkpoints and live forks taken with the workspace frozen', [], () => [{ labels: {}, value: ckpt().freezes }]);
  registerCounterView('atelier_checkpoint_refused_total', 'Checkpoints refused at the quota, by limit (count, bytes)', ['limit'], () => ckpt().refused);
  registerGauge({ name: 'atelier_checkpoints_stored', help: 'Checkpoints kept', collect: () => ckpt().stored });
  registerGauge({ name: 'atelier_checkpoints_stored_disk_bytes', help: 'Host disk the kept checkpoints take', collect: () => ckpt().storedBytes });
  // The image pool (sandbox/image-pool.ts): state 'xfs' (images in the XFS file with reflinks) or 'off' (in the data directory; reason says why).
  const pool = app.imagePool;
  registerGauge({ name: 'atelier_image_pool_info', help: 'Where workspace, checkpoint and template images are: state xfs (the image pool, reflink copies) or off (the data directory), and why', labelNames: ['state', 'reason'], collect: () => [{ labels: { state: pool.state, reason: pool.reason }, value: 1 }] });
  registerGauge({ name: 'atelier_image_pool_size_bytes', help: "The image pool filesystem's size (0 without a pool)", collect: () => pool.usage()?.sizeBytes ?? 0 });
  registerGauge({ name: 'atelier_image_pool_used_bytes', help: "Bytes in use in the image pool filesystem, shared (reflinked) blocks once (0 without a pool)", collect: () => pool.usage()?.usedBytes ?? 0 });
  registerGauge({ name: 'atelier_image_pool_host_bytes', help: 'Host disk the image pool file takes (0 without a pool)', collect: () => pool.usage()?.hostFileBytes ?? 0 });

  // Backups (issue #35 item 2): seconds since the last good one; absent until there is one.
  registerGauge({
    name: 'atelier_backup_age_seconds',
    help: 'Seconds since the last successful backup finished; absent when none was taken',
    collect: () => {
      const last = app.lastBackupAt();
      return last ? Math.max(0, Math.round((Date.now() - Date.parse(last)) / 1000)) : null;
    },
  });

}

