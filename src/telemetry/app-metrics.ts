/**
 * The application's gauges on /metrics (issue #35 item 5; names in docs/operations.md "Metrics").
 * Composition level (it reads the App), like src/server.ts: test/unit/layers.test.ts counts this
 * file in the server's area.
 */
import type { App } from '../app.js';
import { VERSION } from '../core/version.js';
import type { WorkspaceState } from '../services/workspaces/index.js';
import { AGENT_STATUSES } from '../services/agents/index.js';
import { registerCounterView, registerGauge } from './metrics.js';
import { SANDBOX_KINDS, sandboxKind } from '../sandbox/executor.js';

const WORKSPACE_STATES: readonly string[] = ['opening', 'active', 'expired_recoverable', 'closed'] satisfies WorkspaceState[];

/** The application's gauges (one app per process serves /metrics). */
export function registerAppMetrics(app: App): void {
  const started = Date.now();
  registerGauge({ name: 'atelier_info', help: 'Build information', labelNames: ['version'], collect: () => [{ labels: { version: VERSION }, value: 1 }] });
  registerGauge({ name: 'atelier_uptime_seconds', help: 'Seconds since start', collect: () => Math.floor((Date.now() - started) / 1000) });
  const byState = (table: 'workspaces' | 'agents', column: string, known: readonly string[]) => () => {
    const rows = app.db.prepare(`SELECT ${column} AS s, COUNT(*) AS n FROM ${table} GROUP BY ${column}`).all() as Array<{ s: string; n: number }>;
    const out = new Map(known.map((s) => [s, 0]));
    for (const r of rows) out.set(r.s, r.n);
    return [...out].map(([state, value]) => ({ labels: { state }, value }));
  };
  registerGauge({ name: 'atelier_workspaces', help: 'Workspaces by state', labelNames: ['state'], collect: byState('workspaces', 'state', WORKSPACE_STATES) });
  registerGauge({ name: 'atelier_agents', help: 'Agents by state', labelNames: ['state'], collect: byState('agents', 'status', AGENT_STATUSES) });

  // Sandbox resources, summed over the running workspace sandboxes (read from their cgroups at scrape time, cached 5 s).
  let cached: { at: number; value: Promise<{ sandboxes: number; memoryBytes: number; pids: number; cpuSeconds: number }> } | null = null;
  const sandboxTotals = () => {
    if (cached && Date.now() - cached.at < 5000) return cached.value;
    const value = (async () => {
      const handles = app.workspaces.liveSandboxes();
      const stats = await Promise.all(handles.map((h) => app.executor.stats(h).catch(() => null)));
      const ok = stats.filter((s) => s !== null);
      return {
        sandboxes: handles.length,
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
      const n = new Map(SANDBOX_KINDS.map((k) => [k, 0]));
      for (const h of app.workspaces.liveSandboxes()) n.set(sandboxKind(h), (n.get(sandboxKind(h)) ?? 0) + 1);
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
      for (const h of app.workspaces.liveSandboxes()) if (h.placement?.claim) n[h.placement.claim.launch]++;
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
        const w = app.spend.window(window);
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
      const p = app.spend.policies();
      return [
        ...(p.dailyCapMicros === null ? [] : [{ labels: { window: 'day' }, value: p.dailyCapMicros }]),
        ...(p.monthlyCapMicros === null ? [] : [{ labels: { window: 'month' }, value: p.monthlyCapMicros }]),
      ];
    },
  });

  // Password login (issue #31): the names tests and docs already use.
  const login = () => app.loginThrottle.metrics();
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
  if (app.executor.fileHandoffs) {
    const handoffs = () => app.executor.fileHandoffs!();
    registerCounterView('atelier_file_handoffs_total', "files_read ranges read through the daemon's handed-off descriptor (taken), and handoffs refused or failed (read the ordinary way)", ['outcome'], () => [
      { labels: { outcome: 'taken' }, value: handoffs().taken },
      { labels: { outcome: 'refused' }, value: handoffs().refused },
    ]);
  }
  // Checkpoints and forks (issue #33): copies by operation and mode, their disk, freezes, refusals, what is kept.
  const ckpt = () => app.checkpoints.metricValues();
  // Code intelligence (issue #44): requests by language server and outcome, restarts seen in the daemons' replies.
  registerCounterView('atelier_code_intel_requests_total', 'code_* tool calls by language server (none: no server) and outcome (ok, or the error code)', ['server', 'outcome'], () => app.codeIntel.metrics().requests);
  registerCounterView('atelier_code_intel_restarts_total', "Language-server restarts (after a crash or an idle stop) seen in the daemons' replies, by server", ['server'], () => app.codeIntel.metrics().restarts);
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
      const last = app.backups.summary().last;
      return last ? Math.max(0, Math.round((Date.now() - Date.parse(last.finishedAt)) / 1000)) : null;
    },
  });

}

