/**
 * The operator's view of the instance (issue #35 item 6, docs/dashboard.md "Overview"): tool calls
 * and errors over the last hour with the slowest tools (counted in memory, per minute, by
 * CallStats), and the disk the instance uses (workspaces, artifacts, release images) against its
 * limits, with warnings when one is near.
 *
 * Disk use of a workspace directory is measured by `du` running as the sandbox uid (a workspace
 * changes its own tree; nothing here walks it as root), cached for a minute; per-workspace
 * filesystems (disk images) are measured by the image's allocated size.
 */
import { execFile } from 'node:child_process';
import { lstatSync, readdirSync, statfsSync } from 'node:fs';
import { join } from 'node:path';

const MINUTE = 60_000;

interface Bucket {
  minute: number;
  tools: Map<string, { calls: number; errors: number; totalMs: number; maxMs: number }>;
}

/** Calls per tool per minute over the last hour (a ring of 60 buckets; nothing else is kept). */
export class CallStats {
  private readonly buckets: Bucket[] = [];
  constructor(private readonly now: () => number = Date.now) {}

  record(tool: string, ms: number, ok: boolean): void {
    const minute = Math.floor(this.now() / MINUTE);
    let b = this.buckets[this.buckets.length - 1];
    if (!b || b.minute !== minute) {
      b = { minute, tools: new Map() };
      this.buckets.push(b);
      while (this.buckets.length > 0 && this.buckets[0]!.minute <= minute - 60) this.buckets.shift();
    }
    let t = b.tools.get(tool);
    if (!t) b.tools.set(tool, (t = { calls: 0, errors: 0, totalMs: 0, maxMs: 0 }));
    t.calls++;
    if (!ok) t.errors++;
    t.totalMs += ms;
    t.maxMs = Math.max(t.maxMs, ms);
  }

  /** The last hour: totals, and the slowest tools by mean duration (at most `top`). */
  lastHour(top = 5): { calls: number; errors: number; slowest: Array<{ tool: string; calls: number; errors: number; meanMs: number; maxMs: number }> } {
    const from = Math.floor(this.now() / MINUTE) - 59;
    const agg = new Map<string, { calls: number; errors: number; totalMs: number; maxMs: number }>();
    for (const b of this.buckets) {
      if (b.minute < from) continue;
      for (const [tool, t] of b.tools) {
        const a = agg.get(tool) ?? { calls: 0, errors: 0, totalMs: 0, maxMs: 0 };
        a.calls += t.calls;
        a.errors += t.errors;
        a.totalMs += t.totalMs;
        a.maxMs = Math.max(a.maxMs, t.maxMs);
        agg.set(tool, a);
      }
    }
    let calls = 0;
    let errors = 0;
    for (const a of agg.values()) {
      calls += a.calls;
      errors += a.errors;
    }
    const slowest = [...agg.entries()]
      .map(([tool, a]) => ({ tool, calls: a.calls, errors: a.errors, meanMs: Math.round(a.totalMs / a.calls), maxMs: a.maxMs }))
      .sort((x, y) => y.meanMs - x.meanMs || y.maxMs - x.maxMs)
      .slice(0, top);
    return { calls, errors, slowest };
  }
}

export interface DiskView {
  workspaces: { bytes: number | null; count: number; limitBytesEach: number | null; near: string[] };
  artifacts: { bytes: number; quotaBytes: number };
  releases: { bytes: number; count: number };
  filesystem: { freeBytes: number; totalBytes: number } | null;
  warnings: string[];
  measuredAt: string;
}

/** Share of a limit past which the overview warns. */
export const NEAR = 0.8;

function sizeOf(path: string): number {
  try {
    const st = lstatSync(path);
    return st.isFile() ? st.blocks * 512 : 0;
  } catch {
    return 0;
  }
}

function du(dir: string, uid: number | undefined): Promise<number | null> {
  return new Promise((resolve) => {
    execFile('du', ['-s', '-B1', '--one-file-system', dir], { timeout: 30_000, ...(uid !== undefined ? { uid, gid: uid } : {}) }, (err, stdout) => {
      const n = /^(\d+)\s/.exec(stdout ?? '');
      // du reports what it could read even when a part was unreadable (exit 1).
      resolve(n ? Number(n[1]) : err ? null : 0);
    });
  });
}

export class DiskUsage {
  private cached: { at: number; view: DiskView } | undefined;
  private pending: Promise<DiskView> | undefined;

  constructor(
    private readonly deps: {
      dataDir: string;
      /** Where disks/ is (the image pool's mount point, or the data directory). */
      imagesDir?: string;
      sandboxUid: number;
      sandboxDiskMb: number;
      artifactQuotaBytes: number;
      artifactBytes: () => number;
      workspaceIds: () => string[];
    },
  ) {}

  /** The disk view, measured at most once a minute. */
  async view(): Promise<DiskView> {
    if (this.cached && Date.now() - this.cached.at < MINUTE) return this.cached.view;
    this.pending ??= this.measure().finally(() => (this.pending = undefined));
    return this.pending;
  }

  private async measure(): Promise<DiskView> {
    const d = this.deps;
    const ids = d.workspaceIds();
    const limit = d.sandboxDiskMb > 0 ? d.sandboxDiskMb * 1_048_576 : null;
    const asUid = process.getuid?.() === 0 ? d.sandboxUid : undefined;
    let total: number | null = 0;
    const near: string[] = [];
    for (const id of ids) {
      if (!/^[A-Za-z0-9_-]{1,100}$/.test(id)) continue;
      const img = sizeOf(join(d.imagesDir ?? d.dataDir, 'disks', `${id}.img`));
      const used = img > 0 ? img : await du(join(d.dataDir, 'workspaces', id), asUid);
      if (used === null) total = null;
      else if (total !== null) total += used;
      if (used !== null && limit !== null && used >= NEAR * limit) near.push(id);
    }
    let releases = 0;
    let releaseCount = 0;
    try {
      for (const n of readdirSync(join(d.dataDir, 'packages', 'releases'))) {
        if (!n.endsWith('.sqfs')) continue;
        releases += sizeOf(join(d.dataDir, 'packages', 'releases', n));
        releaseCount++;
      }
    } catch {
      /* no releases yet */
    }
    let filesystem: DiskView['filesystem'] = null;
    try {
      const s = statfsSync(d.dataDir);
      filesystem = { freeBytes: s.bavail * s.bsize, totalBytes: s.blocks * s.bsize };
    } catch {
      /* not measurable */
    }
    const artifacts = d.artifactBytes();
    const warnings: string[] = [];
    const mib = (n: number) => `${Math.round(n / 1_048_576)} MiB`;
    if (artifacts >= NEAR * d.artifactQuotaBytes) warnings.push(`artifacts use ${mib(artifacts)} of their ${mib(d.artifactQuotaBytes)} quota (--artifact-quota-mb): snapshots are refused once it is full`);
    for (const id of near) warnings.push(`workspace ${id} uses more than ${Math.round(NEAR * 100)}% of its ${mib(limit!)} disk (--sandbox-disk-mb)`);
    if (filesystem && filesystem.totalBytes > 0 && filesystem.freeBytes < Math.max((1 - NEAR) * filesystem.totalBytes, 0)) {
      warnings.push(`the data directory's filesystem has ${mib(filesystem.freeBytes)} free of ${mib(filesystem.totalBytes)}`);
    }
    const view: DiskView = {
      workspaces: { bytes: total, count: ids.length, limitBytesEach: limit, near },
      artifacts: { bytes: artifacts, quotaBytes: d.artifactQuotaBytes },
      releases: { bytes: releases, count: releaseCount },
      filesystem,
      warnings,
      measuredAt: new Date().toISOString(),
    };
    this.cached = { at: Date.now(), view };
    return view;
  }
}
