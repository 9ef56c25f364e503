/**
 * The operator's view of the instance (issue #35 item 6), shown on the dashboard's overview:
 *   GET /api/v1/instance   version and schema, uptime, backups (last, last failure, schedule), tool
 *                          calls and errors over the last hour with the slowest tools, disk use of
 *                          workspaces, artifacts and release images against their limits, warnings
 */
import type { ApiRegistrar } from './routes.js';
import { VERSION } from '../core/version.js';

/** A backup older than this many intervals of the schedule (or a day without one) is a warning. */
const STALE_INTERVALS = 2;

export const instanceRoutes: ApiRegistrar = (api, app) => {
  api.get('/instance', async () => {
    const backups = app.backups.summary();
    const disk = await app.disk.view();
    const calls = app.callStats.lastHour(5);
    const warnings = [...disk.warnings];
    const sched = backups.schedule;
    const lastAt = backups.last ? Date.parse(backups.last.finishedAt) : null;
    if (backups.lastFailure) warnings.push(`the last backup failed (${backups.lastFailure.finishedAt}): ${backups.lastFailure.error ?? 'see the log'}`);
    if (sched && (lastAt === null || Date.now() - lastAt > STALE_INTERVALS * sched.intervalMinutes * 60_000) && Date.now() - app.startedAt > sched.intervalMinutes * 60_000) {
      warnings.push(`no successful backup in the last ${STALE_INTERVALS * sched.intervalMinutes} minutes although backups are scheduled every ${sched.intervalMinutes}`);
    }
    if (!sched && lastAt === null) warnings.push('no backup was ever taken: run `atelier backup DEST` or set --backup-dir (docs/operations.md)');
    return {
      version: VERSION,
      schema: app.schemaVersion,
      startedAt: new Date(app.startedAt).toISOString(),
      uptimeSeconds: Math.floor((Date.now() - app.startedAt) / 1000),
      backups,
      calls: { windowMinutes: 60, ...calls },
      disk,
      warnings,
      asOf: new Date().toISOString(),
    };
  });
};
