/**
 * Approvals inside the client, the pipeline step on its own (src/mcp/in-call-approvals.ts; the e2e
 * tests go through the real service: test/e2e/mcp-approvals.test.ts): the grant a waiting call spends
 * binds exactly its subject, the wait ends with the owner's decision, the client's answer or the
 * bound, and a client that cannot open approvals changes nothing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type DB } from '../../src/store/db.js';
import { AuditLog } from '../../src/services/instance/audit.js';
import { ApprovalService, withApprovedRequest } from '../../src/services/approvals.js';
import { ServiceError } from '../../src/core/errors.js';
import { runWithApprovals, approvalUrl, type ApprovalAsk, type InCallApprovals } from '../../src/mcp/in-call-approvals.js';

let dir: string;
let db: DB;
let approvals: ApprovalService;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'atelier-incall-'));
  db = openDatabase(join(dir, 'a.db'));
  approvals = new ApprovalService({ db, audit: new AuditLog(db) });
});
afterEach(() => {
  delete process.env.ATELIER_TEST_APPROVAL_WAIT_MS;
  db.close();
  rmSync(dir, { recursive: true, force: true });
});

const subject = (command: string) => ApprovalService.privilegedCommand('ws_1', command, '.');
/** A handler that needs approval for `command`: consume without a token, as exec_run does. */
const handler = (command: string, ran: string[]) => async () => {
  const id = approvals.consume(subject(command), undefined, 'tok_a', 'mcp', 'a privileged command');
  ran.push(command);
  return { ran: command, approvalId: id };
};
const refusal = async (p: Promise<unknown>): Promise<ServiceError> => {
  try {
    await p;
  } catch (e) {
    return e as ServiceError;
  }
  throw new Error('expected a refusal');
};

/** A client that opens the approval and does what `user` does there. */
function client(user: (ask: ApprovalAsk) => void | Promise<void>, answer: 'accept' | 'decline' | 'cancel' = 'accept'): InCallApprovals & { asked: ApprovalAsk[] } {
  const asked: ApprovalAsk[] = [];
  return {
    asked,
    origin: 'https://atelier.example',
    ask: async (ask) => {
      asked.push(ask);
      await user(ask);
      return answer;
    },
  };
}

describe('runWithApprovals', () => {
  it('without a client that opens approvals: the refusal of old, unchanged', async () => {
    const ran: string[] = [];
    const e = await refusal(runWithApprovals(approvals, undefined, 'exec_run', new AbortController().signal, handler('id -u', ran)));
    expect(e).toMatchObject({ code: 'PERMISSION_DENIED', details: { field: 'approvalGrantToken', kind: 'privileged_command' } });
    expect(ran).toEqual([]);
  });

  it('approved while the call waits: the call runs once and spends the grant itself', async () => {
    const ran: string[] = [];
    const c = client((ask) => void approvals.decide(ask.approvalId, true));
    const r = await runWithApprovals(approvals, c, 'exec_run', new AbortController().signal, handler('id -u', ran));
    expect(ran).toEqual(['id -u']);
    expect(c.asked).toHaveLength(1);
    expect(c.asked[0]!.url).toBe(approvalUrl('https://atelier.example', c.asked[0]!.approvalId));
    expect(r.approvalId).toBe(c.asked[0]!.approvalId);
    expect(approvals.get(r.approvalId).state).toBe('used');
  });

  it('denied: PERMISSION_DENIED saying so; declined in the client: the request stays pending', async () => {
    const ran: string[] = [];
    const denied = await refusal(runWithApprovals(approvals, client((ask) => void approvals.decide(ask.approvalId, false)), 'exec_run', new AbortController().signal, handler('rm -rf /x', ran)));
    expect(denied).toMatchObject({ code: 'PERMISSION_DENIED', details: { approvalState: 'denied' } });
    const c = client(() => undefined, 'decline');
    const declined = await refusal(runWithApprovals(approvals, c, 'exec_run', new AbortController().signal, handler('id', ran)));
    expect(declined).toMatchObject({ code: 'PERMISSION_DENIED', details: { clientAnswer: 'decline', approvalState: 'pending' } });
    expect(approvals.get(c.asked[0]!.approvalId).state).toBe('pending');
    expect(ran).toEqual([]);
  });

  it('still undecided after the wait: PERMISSION_DENIED with the request pending; a cancelled call stops waiting', async () => {
    process.env.ATELIER_TEST_APPROVAL_WAIT_MS = '50';
    const ran: string[] = [];
    const e = await refusal(runWithApprovals(approvals, client(() => undefined), 'exec_run', new AbortController().signal, handler('sleep 1', ran)));
    expect(e).toMatchObject({ code: 'PERMISSION_DENIED', details: { approvalState: 'pending' } });
    delete process.env.ATELIER_TEST_APPROVAL_WAIT_MS;
    const abort = new AbortController();
    const c = client(() => void setImmediate(() => abort.abort()));
    const cancelled = await refusal(runWithApprovals(approvals, c, 'exec_run', abort.signal, handler('sleep 2', ran)));
    expect(cancelled.code).toBe('CANCELLED');
    expect(ran).toEqual([]);
  });

  it('the waiting scope spends only a grant for exactly the subject asked: another command files its own request', () => {
    // The owner approved "id -u"; a call holding that approval asks for something else.
    const first = (() => {
      try {
        approvals.consume(subject('id -u'), undefined, 'tok_a', 'mcp', 'x');
      } catch (e) {
        return (e as ServiceError).details.approvalRequestId as string;
      }
      throw new Error('no request');
    })();
    approvals.decide(first, true);
    const other = (() => {
      try {
        withApprovedRequest(first, () => approvals.consume(subject('id -u; curl evil'), undefined, 'tok_a', 'mcp', 'x'));
      } catch (e) {
        return e as ServiceError;
      }
      throw new Error('ran with another command\'s grant');
    })();
    expect(other.details.approvalRequestId).not.toBe(first);
    expect(approvals.get(first).state).toBe('approved'); // not spent
    // Another workspace, same command: not spent either.
    expect(() => withApprovedRequest(first, () => approvals.consume(ApprovalService.privilegedCommand('ws_2', 'id -u', '.'), undefined, 'tok_a', 'mcp', 'x'))).toThrow(ServiceError);
    expect(approvals.get(first).state).toBe('approved');
    // The exact subject: spent once, and never again.
    expect(withApprovedRequest(first, () => approvals.consume(subject('id -u'), undefined, 'tok_a', 'mcp', 'x'))).toBe(first);
    expect(approvals.get(first).state).toBe('used');
    expect(() => withApprovedRequest(first, () => approvals.consume(subject('id -u'), undefined, 'tok_a', 'mcp', 'x'))).toThrow(ServiceError);
  });
});
