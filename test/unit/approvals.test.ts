/**
 * The approvals service on its own (the e2e tests go through the real service: commands, packages,
 * extensions, dashboard): every path that uses a grant honours its expiry, a privileged grant binds
 * the working directory, and every view carries the text as the owner must read it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type DB } from '../../src/store/db.js';
import { AuditLog } from '../../src/services/instance/audit.js';
import { ApprovalService, GRANT_TTL_MS, grantTtlMs } from '../../src/services/approvals.js';
import { ServiceError } from '../../src/core/errors.js';

let dir: string;
let db: DB;
let approvals: ApprovalService;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'atelier-approvals-'));
  db = openDatabase(join(dir, 'a.db'));
  approvals = new ApprovalService({ db, audit: new AuditLog(db) });
});
afterEach(() => {
  db.close();
  rmSync(dir, { recursive: true, force: true });
});

const refusal = (fn: () => unknown): ServiceError => {
  try {
    fn();
  } catch (e) {
    return e as ServiceError;
  }
  throw new Error('expected a refusal');
};
const backdate = (id: string) => db.prepare('UPDATE approvals SET grant_expires_at = ? WHERE id = ?').run(new Date(Date.now() - 1000).toISOString(), id);

describe('grant expiry on every path', () => {
  it('markUsed (a package plan applied by id) refuses a grant past its expiry and marks it expired, not used', () => {
    const plan = { kind: 'package_plan' as const, workspaceId: null, text: 'plan text', digest: 'd'.repeat(64) };
    const id = approvals.requestApproval(plan, 'token_x', 'mcp', 'a package plan').details.approvalRequestId as string;
    approvals.decide(id, true);
    backdate(id);
    const e = refusal(() => approvals.markUsed(id, 'package_plan', 'd'.repeat(64), 'mcp', 'token_x'));
    expect([e.code, e.details.approvalState]).toEqual(['PERMISSION_DENIED', 'expired']);
    expect(e.message).toContain('expired');
    const row = db.prepare('SELECT state, used_at FROM approvals WHERE id = ?').get(id);
    expect(row).toEqual({ state: 'expired', used_at: null });
  });

  it('markUsed uses an unexpired grant once', () => {
    const plan = { kind: 'package_plan' as const, workspaceId: null, text: 'plan text', digest: 'e'.repeat(64) };
    const id = approvals.requestApproval(plan, 'token_x', 'mcp', 'a package plan').details.approvalRequestId as string;
    approvals.decide(id, true);
    approvals.markUsed(id, 'package_plan', 'e'.repeat(64), 'mcp', 'token_x');
    expect(refusal(() => approvals.markUsed(id, 'package_plan', 'e'.repeat(64), 'mcp', 'token_x')).details.approvalState).toBe('used');
  });

  it('a token past its expiry is refused by consume, and views say expired without anyone using it', () => {
    const subject = ApprovalService.privilegedCommand('ws_' + 'a'.repeat(22), 'id -u', '.');
    const id = approvals.requestApproval(subject, 'token_x', 'mcp', 'x').details.approvalRequestId as string;
    const token = approvals.decide(id, true).approvalGrantToken as string;
    backdate(id);
    expect(approvals.get(id).state).toBe('expired');
    expect(refusal(() => approvals.consume(subject, token, 'token_x', 'mcp', 'x')).message).toMatch(/grant expired/);
  });

  it('the test hook shortens grants, never lengthens them', () => {
    const old = process.env.ATELIER_TEST_GRANT_TTL_MS;
    try {
      for (const [v, want] of [['0', 0], ['1500', 1500], ['99999999', GRANT_TTL_MS], ['-5', GRANT_TTL_MS], ['nope', GRANT_TTL_MS], ['', GRANT_TTL_MS]] as const) {
        process.env.ATELIER_TEST_GRANT_TTL_MS = v;
        expect(grantTtlMs(), v).toBe(want);
      }
    } finally {
      if (old === undefined) delete process.env.ATELIER_TEST_GRANT_TTL_MS;
      else process.env.ATELIER_TEST_GRANT_TTL_MS = old;
    }
  });
});

describe('privileged command grants', () => {
  it('bind the working directory as well as the command', () => {
    const ws = 'ws_' + 'b'.repeat(22);
    const here = ApprovalService.privilegedCommand(ws, 'make install', 'build');
    const id = approvals.requestApproval(here, 'token_x', 'mcp', 'x').details.approvalRequestId as string;
    const token = approvals.decide(id, true).approvalGrantToken as string;
    const there = refusal(() => approvals.consume(ApprovalService.privilegedCommand(ws, 'make install', '.'), token, 'token_x', 'mcp', 'x'));
    expect(there.message).toContain('working directory');
    expect(approvals.consume(here, token, 'token_x', 'mcp', 'x')).toBe(id);
    const v = approvals.get(id);
    expect([v.cwd, v.display.cwd, v.command]).toEqual(['build', 'build', 'make install']);
  });
});

describe('what every view carries', () => {
  it('the subject, details, cwd and requester as the owner reads them, flagged when anything is hidden', () => {
    const subject = ApprovalService.privilegedCommand('ws_' + 'c'.repeat(22), 'echo \u202Eabc', 'sub\u200Bdir');
    const id = approvals.requestApproval(subject, 'client\u2066x', 'mcp', 'x').details.approvalRequestId as string;
    const v = approvals.get(id);
    expect(v.subject).toBe('echo \u202Eabc');
    expect(v.display).toEqual({ subject: 'echo \\u{202E}abc', details: '{\n  "cwd": "sub\\u{200B}dir"\n}', requestedBy: 'client\\u{2066}x', cwd: 'sub\\u{200B}dir' });
    expect(v.flags).toEqual(['hidden_characters']);
    expect(v.hiddenCharacters.map((h) => `${h.field}:${h.codePoint}`)).toEqual(['subject:U+202E', 'details:U+200B', 'requestedBy:U+2066', 'cwd:U+200B']);
    expect(approvals.list({ state: 'pending' })[0]!.flags).toEqual(['hidden_characters']);
  });
});
