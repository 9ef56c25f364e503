/**
 * The bubblewrap driver's WorkspaceStorage (executor.ts): each workspace's files under
 * <dataDir>/workspaces/<id> on this host, on its own ext4 image when a disk limit is set
 * (disk.ts), the directories made and removed by descriptor (rootdir.ts).
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { cleanSpareImages, ensureWorkspaceDisk, imagePath, mountScratchDisk, prepareSpareImage, releaseWorkspaceDisk, unmountScratchDisk, type DiskOptions } from './disk.js';
import type { WorkspaceImageCopies, WorkspaceStorage } from './executor.js';
import { HOST_IMAGE_COPIES } from './snapshot.js';
import { prepareRootDir, removeSandboxRoot } from './rootdir.js';

export class HostWorkspaceStorage implements WorkspaceStorage {
  /** Checkpoints and forks copy each workspace's image file (snapshot.ts). */
  readonly copies: WorkspaceImageCopies = HOST_IMAGE_COPIES;

  constructor(private readonly o: DiskOptions) {}

  private get ids() {
    return { uid: this.o.uid, gid: this.o.gid };
  }

  async prepare(id: string, rootDir: string): Promise<void> {
    if (this.o.sizeMb > 0) await ensureWorkspaceDisk(this.o, id, rootDir);
    await prepareRootDir(rootDir, this.ids);
  }

  async remove(id: string, rootDir: string): Promise<void> {
    if (this.o.sizeMb > 0) await releaseWorkspaceDisk({ dataDir: this.o.dataDir }, id, rootDir);
    await removeSandboxRoot(rootDir, this.ids).catch((e) => {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    });
  }

  async prepareSpare(): Promise<boolean> {
    if (this.o.sizeMb <= 0) return false;
    await prepareSpareImage(this.o);
    return true;
  }

  async cleanSpares(): Promise<void> {
    if (this.o.sizeMb > 0) await cleanSpareImages(this.o);
  }

  image(id: string): string | undefined {
    if (this.o.sizeMb <= 0) return undefined;
    mkdirSync(join(this.o.dataDir, 'disks'), { recursive: true, mode: 0o700 });
    return imagePath(this.o.dataDir, id);
  }

  async unmount(_id: string, rootDir: string): Promise<void> {
    await unmountScratchDisk(rootDir);
  }

  async mountScratch(img: string, sizeMb: number, dir: string): Promise<void> {
    await mountScratchDisk(img, sizeMb, dir);
  }

  async unmountScratch(dir: string): Promise<void> {
    await unmountScratchDisk(dir);
  }
}
