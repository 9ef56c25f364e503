/**
 * The sandboxes' cgroups as the driver reaches them (cgroups.ts does the work): the manager,
 * discovered on first use (or none, in development without cgroups); a sandbox's cgroup made
 * afresh before a start, looked up when it exists, and cached for exec's per-call lookup.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { ServiceError } from '../../core/errors.js';
import { CgroupManager, favorDynamicCgroupModifications, type SandboxCgroup } from '../cgroups.js';
import type { SandboxLimits } from '../executor.js';

export interface CgroupSettings {
  runDir: string;
  cgroupParent: string | undefined;
  favorDynmods: boolean;
  allowNoCgroups: boolean;
}

export class CgroupAccess {
  private cgroupManager: CgroupManager | null | undefined;
  /** Per sandbox: its cgroup once seen to exist, for exec() (dropped at stop). */
  private readonly execCgroups = new Map<string, SandboxCgroup>();

  constructor(
    private readonly settings: CgroupSettings,
    private readonly onNote: ((message: string) => void) | undefined,
  ) {}

  /** Creates the sandbox's cgroups after killing whatever an unrecovered earlier run left there. */
  async create(id: string, limits: SandboxLimits): Promise<SandboxCgroup | undefined> {
    const mgr = this.manager();
    if (!mgr) return undefined;
    const group = mgr.group(id);
    try {
      if (group.exists()) await group.killAll();
      return await mgr.create(id, limits);
    } catch (err) {
      await group.remove().catch(() => undefined);
      if (this.settings.allowNoCgroups) return undefined;
      throw cgroupError(err);
    }
  }

  /** existing() for exec(): after the first look, one stat (the freezer group execs are placed in). */
  forExec(id: string): SandboxCgroup | undefined {
    const known = this.execCgroups.get(id);
    if (known && existsSync(known.dirs.freezer)) return known;
    this.execCgroups.delete(id);
    const cg = this.existing(id);
    if (cg) this.execCgroups.set(id, cg);
    return cg;
  }

  /** The sandbox stopped: exec's cached cgroup goes. */
  forget(id: string): void {
    this.execCgroups.delete(id);
  }

  existing(id: string): SandboxCgroup | undefined {
    const group = this.manager()?.group(id);
    return group?.exists() ? group : undefined;
  }

  private manager(): CgroupManager | undefined {
    if (this.cgroupManager === undefined) {
      try {
        this.cgroupManager = CgroupManager.discover(this.settings.cgroupParent);
        if (this.settings.favorDynmods) {
          mkdirSync(this.settings.runDir, { recursive: true, mode: 0o700 });
          this.onNote?.(`cgroup favordynmods (fast task moves between cgroups): ${favorDynamicCgroupModifications(this.settings.runDir)}`);
        }
      } catch (err) {
        if (!this.settings.allowNoCgroups) throw cgroupError(err);
        this.cgroupManager = null;
      }
    }
    return this.cgroupManager ?? undefined;
  }
}

function cgroupError(err: unknown): ServiceError {
  const message = err instanceof Error ? err.message : String(err);
  return new ServiceError(
    'FAILED_PRECONDITION',
    `cannot set up sandbox cgroups: ${message} (the runner must be root with cgroup v1 memory, pids, cpu, cpuacct, cpuset and freezer mounted; allowNoCgroups exists for development only)`,
  );
}
