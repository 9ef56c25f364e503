/**
 * One door (issue #34 item 2): nothing above src/sandbox/ knows which driver runs. Outside
 * src/sandbox/ only the driver-neutral modules may be imported: the Executor interface, the
 * daemon's wire contract and the pure address helpers. The composition root (app.ts, and the
 * driver choice in it) may import drivers. Each driver stays in its own modules: the Kubernetes
 * driver imports nothing of the bubblewrap driver's.
 *
 * Known exceptions are listed with their reason; an exception no import uses any more fails the
 * test, so the list only shrinks.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = resolve(__dirname, '../../src');

const NEUTRAL = new Set([
  'sandbox/executor.ts',
  'sandbox/daemon/protocol.ts',
  'sandbox/egress/address.ts',
  // The runner's egress proxies: a host Unix socket the services start and hand to whichever
  // driver runs (SandboxNetwork.proxySocket; bubblewrap binds it, Kubernetes tunnels it). Neither
  // driver imports them.
  'sandbox/egress.ts',
  'sandbox/egress/workspace.ts',
  // Descriptor walks and mount checks of the runner's own directories (releases, build trees),
  // which stay on the runner's host under either driver.
  'sandbox/host-fs.ts',
]);
/** May import any driver: they choose one (app.ts composes; doctor probes the driver serve is about to use: bubblewrap's, skipped under --executor kubernetes). */
const CHOOSERS = new Set(['app.ts', 'sandbox/kubernetes/from-config.ts', 'cli/doctor.ts']);
/** The bubblewrap driver's own modules: its folder, and beside it its storage, image copies, cgroups, disks, root directories, run filesystem, descriptor handoff, native addon, locale. */
const BWRAP_DIR = 'sandbox/bwrap/';
const BWRAP_ONLY = ['sandbox/host-storage.ts', 'sandbox/snapshot.ts', 'sandbox/cgroups.ts', 'sandbox/disk.ts', 'sandbox/rootdir.ts', 'sandbox/runfs.ts', 'sandbox/handoff.ts', 'sandbox/native.ts', 'sandbox/locale.ts'];

const bwrapOnly = (p: string): boolean => p.startsWith(BWRAP_DIR) || BWRAP_ONLY.includes(p);

// Every service reaches the driver through the Executor interface (storage, scratch disks and
// image copies included: WorkspaceStorage.mountScratch / copies). Nothing is excepted; a new
// exception needs its reason here.
const EXCEPTIONS: Array<{ from: string; to: string; why: string }> = [];

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
  });
}

function imports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/(?:import|export)\s[^'"]*?from\s+'(\.{1,2}\/[^']+)'|import\(\s*'(\.{1,2}\/[^']+)'\s*\)/g)) {
    const spec = (m[1] ?? m[2])!;
    out.push(relative(SRC, resolve(dirname(file), spec)).replace(/\.js$/, '.ts'));
  }
  return out;
}

const edges = files(SRC).flatMap((f) => imports(f).map((to) => ({ from: relative(SRC, f), to })));

describe('one door: the executor interface is the only way past src/sandbox/', () => {
  it('above src/sandbox/, only driver-neutral sandbox modules are imported (or a listed exception)', () => {
    const bad = edges.filter((e) => !e.from.startsWith('sandbox/') && !CHOOSERS.has(e.from) && e.to.startsWith('sandbox/') && !NEUTRAL.has(e.to) && !e.to.startsWith('sandbox/daemon/protocol'));
    const unexplained = bad.filter((e) => !EXCEPTIONS.some((x) => x.from === e.from && x.to === e.to));
    expect(unexplained).toEqual([]);
    const unused = EXCEPTIONS.filter((x) => !bad.some((e) => e.from === x.from && e.to === x.to));
    expect(unused, 'an exception no import uses any more: remove it from the list').toEqual([]);
  });

  it('the Kubernetes driver imports nothing of the bubblewrap driver, and the bubblewrap driver nothing of it', () => {
    expect(edges.filter((e) => e.from.startsWith('sandbox/kubernetes/') && bwrapOnly(e.to))).toEqual([]);
    expect(edges.filter((e) => bwrapOnly(e.from) && e.to.startsWith('sandbox/kubernetes/'))).toEqual([]);
  });

  it("the bubblewrap driver's folder is entered only through its index", () => {
    expect(edges.filter((e) => !e.from.startsWith(BWRAP_DIR) && e.to.startsWith(BWRAP_DIR) && e.to !== `${BWRAP_DIR}index.ts`)).toEqual([]);
  });

  it("the workspace service reaches a workspace's files only through the optional Executor.storage", () => {
    const ws = edges.filter((e) => e.from.startsWith('services/workspaces/') && e.to.startsWith('sandbox/'));
    expect(ws.map((e) => e.to)).not.toContain('sandbox/disk.ts');
    expect(ws.map((e) => e.to)).not.toContain('sandbox/rootdir.ts');
    expect(edges).toContainEqual({ from: 'sandbox/host-storage.ts', to: 'sandbox/disk.ts' });
  });

  it('the composition root picks the driver from the settings', () => {
    expect(edges).toContainEqual({ from: 'app.ts', to: 'sandbox/kubernetes/from-config.ts' });
    expect(edges).toContainEqual({ from: 'app.ts', to: 'sandbox/bwrap/index.ts' });
  });

  it("the socket tunnel's Pod end and git's Pod credential helper are of the workspace image: they import only each other (Node built-ins otherwise)", () => {
    const podEnd = ['sandbox/daemon/tunnel.ts', 'sandbox/daemon/tunnel-frames.ts', 'sandbox/daemon/credhelper.ts'];
    for (const f of podEnd) expect(edges.filter((e) => e.from === f && !podEnd.includes(e.to)), f).toEqual([]);
    for (const f of podEnd) expect(readFileSync(join(SRC, f), 'utf8')).not.toMatch(/from '(?!node:|\.\/)/);
  });

  it('git operations learn where a short-lived sandbox takes sockets and files from the executor (ephemeralLayout), not from a driver', () => {
    expect(edges.filter((e) => e.from === 'services/git/ephemeral.ts' && e.to.startsWith('sandbox/kubernetes/'))).toEqual([]);
    expect(readFileSync(join(SRC, 'services/git/ephemeral.ts'), 'utf8')).toContain('deps.executor.ephemeralLayout');
  });
});
