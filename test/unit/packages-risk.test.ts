/** Risk signals of package plans (typosquats, fresh versions, deprecation, scripts) and the stale flag of releases. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { editDistance, riskSignals, similarPopular } from '../../src/services/packages/risk.js';
import { openDatabase } from '../../src/store/db.js';
import { AuditLog } from '../../src/services/instance/audit.js';
import { ApprovalService } from '../../src/services/approvals.js';
import { PackageService } from '../../src/services/packages/packages.js';
import { createLogger } from '../../src/core/log.js';
import type { Config } from '../../src/core/config.js';
import type { Executor } from '../../src/sandbox/executor.js';

const ROOT = join(import.meta.dirname, '../..');

describe('risk signals', () => {
  it('edit distance counts insertions, deletions, substitutions and transpositions', () => {
    expect(editDistance('lodash', 'lodash')).toBe(0);
    expect(editDistance('lodahs', 'lodash')).toBe(1);
    expect(editDistance('lodas', 'lodash')).toBe(1);
    expect(editDistance('expresss', 'express')).toBe(1);
    expect(editDistance('abc', 'xyzw', 2)).toBe(3);
  });
  it('names one edit away from a well-known package are flagged; the package itself and far names are not', () => {
    expect(similarPopular(ROOT, 'npm', 'expres')).toBe('express');
    expect(similarPopular(ROOT, 'npm', 'express')).toBeNull();
    expect(similarPopular(ROOT, 'uv', 'reqeusts')).toBe('requests');
    expect(similarPopular(ROOT, 'uv', 'Requests')).toBeNull();
    expect(similarPopular(ROOT, 'npm', 'my-internal-thing')).toBeNull();
  });
  it('fresh, deprecated and scripted versions each give a signal', () => {
    const now = Date.parse('2026-11-23T00:00:00Z');
    const s = riskSignals(ROOT, 'npm', 'reactt', [
      { name: 'reactt', version: '1.0.0', publishedAt: '2026-11-22T00:00:00Z', deprecated: 'use react', scripts: { postinstall: 'node x' } },
      { name: 'old', version: '1.0.0', publishedAt: '2020-01-01T00:00:00Z' },
    ], now);
    expect(s.map((x) => x.kind).sort()).toEqual(['deprecated', 'install_scripts', 'recently_published', 'similar_to_popular']);
  });
});

describe('releases', () => {
  it('a release built for another executor image is flagged stale', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'atelier-pk-unit-'));
    try {
      const db = openDatabase(join(dir, 'a.db'));
      const audit = new AuditLog(db);
      const svc = new PackageService({
        db,
        config: { dataDir: dir, packagesEnabled: true } as Config,
        log: createLogger('silent'),
        audit,
        approvals: new ApprovalService({ db, audit }),
        executor: {} as Executor,
        installRoot: ROOT,
        workspaces: () => ({ exists: () => false, retained: () => [], sandboxLimits: { memoryBytes: 1, pidsMax: 1, cpuQuotaPercent: 100 }, toolkits: () => ({ toolkits: [], allowChanges: false }) }),
      });
      const now = new Date().toISOString();
      const image = await svc.executorImage();
      for (const [id, img] of [['pkr_' + 'a'.repeat(24), image], ['pkr_' + 'b'.repeat(24), 'older-image']] as const) {
        db.prepare('INSERT INTO package_releases (id, digest, ecosystem, name, version, manifest_json, executor_image, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)').run(id, id, 'npm', id, '1.0.0', '{"versions":[],"binaries":[]}', img, now);
        db.prepare("INSERT INTO package_bindings (id, scope, workspace_id, ecosystem, name, release_id, generation, created_at, updated_at) VALUES (?, 'owner', '', 'npm', ?, ?, 1, ?, ?)").run('pkb_' + id.slice(4), id, id, now, now);
      }
      const list = (await svc.list(undefined, undefined, false)).bindings as Array<{ release: { releaseId: string; stale: boolean } }>;
      expect(Object.fromEntries(list.map((b) => [b.release.releaseId, b.release.stale]))).toEqual({ ['pkr_' + 'a'.repeat(24)]: false, ['pkr_' + 'b'.repeat(24)]: true });
      db.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
