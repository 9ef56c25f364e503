/**
 * A service wired to an HTTPS git host on loopback: the repository prefix approved, the host's CA
 * trusted and its token given to the credential broker (`atelier credentials add-token`), as an
 * operator would configure it.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGitHost, type GitHost } from '../fixtures/githost.js';
import { runCli, startService, unmountUnder, type Service, type StartOptions } from './harness.js';

export interface WorkspaceEnv {
  host: GitHost;
  svc: Service;
  repoUrl: string;
}

export const REPO_FILES: Record<string, string> = {
  'README.md': '# demo\n',
  'package.json': JSON.stringify({ name: 'demo', scripts: { test: 'node --test', 'test:unit': 'node --test unit' } }, null, 2),
  'AGENTS.md': '# Agents\nRun npm test before committing.\n',
  'CLAUDE.md': '# Claude\nPrefer small commits.\n',
  'src/index.ts': 'export function add(a: number, b: number) { return a + b; }\n',
  'src/util.ts': 'export const id = <T>(x: T) => x;\n',
  'tool.py': 'def main():\n    return 1\n',
  Makefile: 'test:\n\tnpm test\n',
};

export async function configFor(host: GitHost, dataDir: string, extra: Record<string, unknown> = {}): Promise<void> {
  writeFileSync(
    join(dataDir, 'config.json'),
    JSON.stringify({
      repositories: {
        allow: [`${host.url}/approved/*`],
        deny: [`${host.url}/approved/denied.git`],
        extraCaCertificates: [host.caCertPath],
      },
      sandboxMemoryMb: 256,
      sandboxPidsMax: 128,
      sandboxDiskMb: 256,
      ...extra,
    }),
  );
  const added = await runCli(['credentials', 'add-token', `${host.url}/`, '--username', 'x-access-token', '--label', 'githost fixture', '--data-dir', dataDir], { input: host.token + '\n' });
  if (added.code !== 0 && !/already has credential/.test(added.stderr)) throw new Error(`atelier credentials add-token failed: ${added.stderr}`);
}

export async function startWorkspaceService(host: GitHost, opts: StartOptions & { config?: Record<string, unknown> } = {}): Promise<Service> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'atelier-ws-'));
  await configFor(host, dataDir, opts.config);
  const svc = await startService({ ...opts, dataDir });
  const dispose = svc.dispose.bind(svc);
  svc.dispose = async () => {
    await dispose();
    // The data dir was ours: remove it (files of workspaces were removed by the service or stay for inspection on failure).
    const { rmSync } = await import('node:fs');
    unmountUnder(dataDir); // workspace filesystems, then the image pool they are in
    rmSync(dataDir, { recursive: true, force: true });
  };
  return svc;
}

export { startGitHost };
