/**
 * The one error type every layer throws, and the one place its public form is built:
 * `errorEnvelope` turns any thrown value into the envelope of docs/errors.md
 * ({ error: { code, message, retryable, details } } and its HTTP status). Every transport (the MCP
 * tool results, the /mcp auth gate, the HTTP front, the dashboard REST API) sends what it returns.
 */

export const ERROR_CODES = {
  // Codes the spec names.
  CONFLICT: { retryable: false, http: 409 },
  STALE_GENERATION: { retryable: false, http: 409 },
  OWNER_APPROVAL_REQUIRED: { retryable: false, http: 403 },
  UNAVAILABLE: { retryable: true, http: 503 },
  NOT_SUPPORTED: { retryable: false, http: 400 },
  price_unverified_for_new_route: { retryable: false, http: 403 },
  unsupported_protocol: { retryable: false, http: 400 },
  // Generic codes.
  INVALID_ARGUMENT: { retryable: false, http: 400 },
  NOT_FOUND: { retryable: false, http: 404 },
  FAILED_PRECONDITION: { retryable: false, http: 412 },
  PERMISSION_DENIED: { retryable: false, http: 403 },
  UNAUTHENTICATED: { retryable: false, http: 401 },
  RESOURCE_EXHAUSTED: { retryable: true, http: 429 },
  DEADLINE_EXCEEDED: { retryable: true, http: 504 },
  NOT_IMPLEMENTED: { retryable: false, http: 501 },
  CANCELLED: { retryable: true, http: 499 },
  INTERNAL: { retryable: true, http: 500 },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

export interface ErrorBody {
  code: ErrorCode;
  message: string;
  retryable: boolean;
  details: Record<string, unknown>;
}

export class ServiceError extends Error {
  readonly code: ErrorCode;
  readonly details: Record<string, unknown>;
  readonly retryable: boolean;

  constructor(code: ErrorCode, message: string, details: Record<string, unknown> = {}, retryable?: boolean) {
    super(message);
    this.name = 'ServiceError';
    this.code = code;
    this.details = details;
    this.retryable = retryable ?? ERROR_CODES[code].retryable;
  }

  toBody(): ErrorBody {
    return { code: this.code, message: this.message, retryable: this.retryable, details: this.details };
  }

  get httpStatus(): number {
    return ERROR_CODES[this.code].http;
  }
}

/** Any thrown value as an envelope body; unknown errors become INTERNAL without leaking their text. */
export function toErrorBody(err: unknown): ErrorBody {
  if (err instanceof ServiceError) return err.toBody();
  // A call cancelled by its client (or its transport closing) is not a fault of the service.
  if (isAbort(err)) return { code: 'CANCELLED', message: 'the call was cancelled before it finished; effects already made are not rolled back', retryable: true, details: {} };
  return {
    code: 'INTERNAL',
    message: 'internal error; the service logged the cause',
    retryable: true,
    details: {},
  };
}

/** The public error envelope and the HTTP status it travels with (docs/errors.md). */
export interface ErrorEnvelope {
  status: number;
  body: { error: ErrorBody };
}

/**
 * Any thrown value as the public envelope: a ServiceError as it is, a cancelled call as CANCELLED,
 * anything else as INTERNAL without its text (the caller logs the cause). `redact` removes secret
 * values (EnvironmentService.redact) from the body before it leaves.
 */
export function errorEnvelope(err: unknown, redact: (body: ErrorBody) => ErrorBody = (body) => body): ErrorEnvelope {
  const body = redact(toErrorBody(err));
  return { status: ERROR_CODES[body.code]?.http ?? 500, body: { error: body } };
}

/** An AbortError (DOMException or Node's AbortError) from a cancelled signal. */
export function isAbort(err: unknown): boolean {
  return typeof err === 'object' && err !== null && ((err as { name?: unknown }).name === 'AbortError' || (err as { code?: unknown }).code === 'ABORT_ERR');
}

export const notImplemented = (tool: string, issue: string): ServiceError =>
  new ServiceError(
    'NOT_IMPLEMENTED',
    `${tool} is not implemented yet in this build (${issue}); see docs/STATUS.md`,
    { tool, tracking: issue },
  );
