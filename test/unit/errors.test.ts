import { describe, expect, it } from 'vitest';
import { ERROR_CODES, ServiceError, errorEnvelope } from '../../src/core/errors.js';

describe('errorEnvelope: the one place the public error shape is built', () => {
  it('sends a ServiceError as it is, with the HTTP status of its code', () => {
    const e = errorEnvelope(new ServiceError('INVALID_ARGUMENT', 'limit: must be at most 500', { field: 'limit' }));
    expect(e).toEqual({ status: 400, body: { error: { code: 'INVALID_ARGUMENT', message: 'limit: must be at most 500', retryable: false, details: { field: 'limit' } } } });
    for (const code of Object.keys(ERROR_CODES) as Array<keyof typeof ERROR_CODES>) {
      expect(errorEnvelope(new ServiceError(code, 'x')).status).toBe(ERROR_CODES[code].http);
    }
  });

  it('keeps an explicit retryable', () => {
    expect(errorEnvelope(new ServiceError('CONFLICT', 'busy', {}, true)).body.error.retryable).toBe(true);
  });

  it('turns an unknown error into INTERNAL without its text', () => {
    const e = errorEnvelope(new Error('secret path /root/master.key'));
    expect(e.status).toBe(500);
    expect(e.body.error).toEqual({ code: 'INTERNAL', message: 'internal error; the service logged the cause', retryable: true, details: {} });
    expect(JSON.stringify(errorEnvelope('a thrown string'))).not.toContain('a thrown string');
    expect(errorEnvelope(undefined).body.error.code).toBe('INTERNAL');
    expect(errorEnvelope(null).body.error.code).toBe('INTERNAL');
  });

  it('turns a cancelled call into CANCELLED', () => {
    const ac = new AbortController();
    ac.abort();
    const e = errorEnvelope(ac.signal.reason);
    expect(e.status).toBe(499);
    expect(e.body.error.code).toBe('CANCELLED');
  });

  it('redacts the body before it leaves', () => {
    const secret = 'sk-live-0123456789abcdef';
    const e = errorEnvelope(new ServiceError('FAILED_PRECONDITION', `the value ${secret} was refused`, { echoed: secret }), (b) =>
      JSON.parse(JSON.stringify(b).split(secret).join('[redacted:KEY]')),
    );
    expect(JSON.stringify(e)).not.toContain(secret);
    expect(e.body.error.message).toBe('the value [redacted:KEY] was refused');
    expect(e.body.error.details).toEqual({ echoed: '[redacted:KEY]' });
  });
});
