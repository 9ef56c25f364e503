/** hardExpiresAt removes a workspace whatever its state, and no renewal moves it. */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;

beforeAll(async () => {
  host = await startGitHost();
  svc = await startWorkspaceService(host, { args: ['--idle-lease-seconds', '10', '--max-workspace-lifetime-seconds', '20'] });
  c = await connectV2(svc);
}, 60_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

it('removes the workspace and every file at hardExpiresAt, renewals notwithstanding', async () => {
  const repoUrl = (await host.createRepo('approved/short', REPO_FILES)).url;
  const r = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'hard-expiry-1' });
  if (!r.ok) throw new Error(r.text);
  const id = r.result.workspaceId as string;
  const hard = Date.parse(r.result.hardExpiresAt as string);
  expect(hard - Date.now()).toBeLessThanOrEqual(20_000);
  const renew = await call(c, 'workspace_lease_renew', { workspaceId: id, extensionSeconds: 3600 });
  expect(renew.ok && renew.result.leaseCapped).toBe(true);
  expect(renew.ok && Date.parse(renew.result.hardExpiresAt as string)).toBe(hard);
  const root = join(svc.dataDir, 'workspaces', id);
  expect(existsSync(root)).toBe(true);
  const deadline = hard + 25_000;
  let state = '';
  while (Date.now() < deadline) {
    const s = await call(c, 'workspace_status', { workspaceId: id });
    state = s.ok ? String(s.result.state) : '';
    if (state === 'closed') break;
    await new Promise((res) => setTimeout(res, 1000));
  }
  expect(state).toBe('closed');
  expect(existsSync(root)).toBe(false);
  const s = await call(c, 'workspace_status', { workspaceId: id });
  expect(s.ok && String(s.result.stateReason)).toMatch(/hard expiry/);
}, 90_000);
