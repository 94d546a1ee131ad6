import type { ErrorRequestHandler, NextFunction, Request, Response } from 'express';
import { RedisUnavailable, StoreError } from '../../shared/errors.js';
import { CursorExpired, RAW_DELETED_HEADER } from '../../shared/rollup/retention.js';
import type { PushOutcome } from './push/outcome.js';

/**
 * The HTTP layer's one map from errors, push outcomes and admission refusals to statuses,
 * headers and JSON bodies, for every route (push, list, pull, config, admin, erase, the app's
 * 404). Every error answer is `{"error": "<sentence>", "code": "<code>"}`: Starfish clients read
 * `error`, programs read `code`. Statuses are chosen from types and codes, never from message text
 * or from a driver's state.
 */

/** Every code an error answer may carry, with its status and what it means. The one list (OpenAPI's enum is made from it). */
export const ERROR_CODES = {
  bad_json: { status: 400, description: 'The body is not JSON (or not UTF-8).' },
  bad_envelope: {
    status: 400,
    description:
      'The body is JSON but not a push envelope: data.events missing, not an array, or an event that is not an object.',
  },
  bad_encoding: {
    status: 400,
    description: 'The body does not decode with its Content-Encoding (corrupt, or bytes after the stream).',
  },
  bad_param: {
    status: 400,
    description: 'A path or query parameter is invalid (characters, length, APP_PATTERN, limit, after).',
  },
  bad_header: { status: 400, description: 'A request header is invalid (Idempotency-Key).' },
  bad_request: {
    status: 400,
    description: 'The request is malformed in another way (an admin body, an unreadable body).',
  },
  unauthorized: { status: 401, description: 'Credentials are missing or invalid.' },
  forbidden: { status: 403, description: 'Valid credentials without a role the route needs.' },
  not_found: { status: 404, description: 'No such route, collection, dead letter or erasure.' },
  method_not_allowed: { status: 405, description: 'The path exists but not with this method; see Allow.' },
  request_timeout: { status: 408, description: 'The request was not completed within REQUEST_TIMEOUT_MS.' },
  cursor_expired: {
    status: 410,
    description: 'The list cursor is older than the raw retention; see Raw-Deleted-Through.',
  },
  too_large: { status: 413, description: "The body (bytes, decoded bytes or events) is over the collection's limit." },
  content_type: { status: 415, description: "The Content-Type is not one of the collection's allowedMimeTypes." },
  content_encoding: {
    status: 415,
    description: 'The Content-Encoding is not gzip, deflate, br or identity (or stacks several).',
  },
  range_not_satisfiable: { status: 416, description: 'The Range is outside the batch file; see Content-Range.' },
  idempotency_conflict: {
    status: 422,
    description: 'The Idempotency-Key was used within its window for another body.',
  },
  rate_limited: { status: 429, description: 'A rate limit or the per-app events budget is spent; see Retry-After.' },
  internal: { status: 500, description: 'An unexpected error; nothing about it is told.' },
  overloaded: {
    status: 503,
    description:
      'Shed: the queue or Redis memory is past its high-water mark, or the memory budget for pushes is spent; see Retry-After.',
  },
  unavailable: {
    status: 503,
    description: 'Redis, the store, the rate limiter or the JWKS cannot be reached right now; see Retry-After.',
  },
} as const satisfies Record<string, { status: number; description: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** The codes, in the order of {@link ERROR_CODES}. */
export const ERROR_CODE_LIST = Object.keys(ERROR_CODES) as ErrorCode[];

/**
 * A refusal the HTTP layer makes (auth, limits, methods, parameters): its code decides the
 * status (through {@link ERROR_CODES}), `headers` go out with it (Retry-After, Allow, …).
 */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  readonly code: ErrorCode;
  readonly headers: Record<string, string>;
  constructor(code: ErrorCode, message: string, headers: Record<string, string> = {}) {
    super(message);
    this.code = code;
    this.headers = headers;
  }

  /** The status of its code. */
  get status(): number {
    return ERROR_CODES[this.code].status;
  }
}

/**
 * For host apps that throw errors by status (kept from earlier versions): the status is theirs,
 * the code the one usual for it.
 */
export class HttpError extends Error {
  override readonly name = 'HttpError';
  readonly status: number;
  readonly headers: Record<string, string>;
  constructor(status: number, message: string, headers: Record<string, string> = {}) {
    super(message);
    this.status = status;
    this.headers = headers;
  }
}

/** An error answer, ready to send. */
export interface ErrorAnswer {
  status: number;
  headers: Record<string, string>;
  body: { error: string; code: ErrorCode };
  /** How the answer is logged (store failures and unexpected errors only). */
  log?: { level: 'warn' | 'error'; fields: Record<string, unknown>; msg: string };
}

/** The code usual for a status, for errors that carry a status but no code (a host app's, Express'). */
const CODE_OF_STATUS: Readonly<Record<number, ErrorCode>> = {
  400: 'bad_request',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  408: 'request_timeout',
  410: 'cursor_expired',
  413: 'too_large',
  415: 'content_type',
  416: 'range_not_satisfiable',
  422: 'idempotency_conflict',
  429: 'rate_limited',
  503: 'unavailable',
};

/** body-parser's (Express' own middleware) error types whose code is not the status' usual one. */
const CODE_OF_EXPRESS_TYPE: Readonly<Record<string, ErrorCode>> = {
  'entity.parse.failed': 'bad_json',
  'encoding.unsupported': 'content_encoding',
  'charset.unsupported': 'content_type',
};

function answer(
  code: ErrorCode,
  error: string,
  headers: Record<string, string> = {},
  status: number = ERROR_CODES[code].status,
): ErrorAnswer {
  return { status, headers, body: { error, code } };
}

/** The answer to a refusal or a failed outcome: its code's status, `Retry-After` when it has a wait. */
export function refusalAnswer(
  code: ErrorCode,
  detail: string,
  retryAfter?: number,
  headers: Record<string, string> = {},
): ErrorAnswer {
  return answer(code, detail, retryAfter === undefined ? headers : { ...headers, 'Retry-After': String(retryAfter) });
}

/** The answer to a push outcome that is not a success; null for a success (answered 200 by the route). */
export function outcomeAnswer(outcome: PushOutcome): ErrorAnswer | null {
  switch (outcome.kind) {
    case 'conflict':
      return answer('idempotency_conflict', outcome.reason);
    case 'rejected':
      return answer('bad_envelope', outcome.reason);
    case 'unavailable':
      return refusalAnswer('unavailable', `${outcome.reason}; retry later`, outcome.retryAfter ?? 1);
    default:
      return null;
  }
}

/**
 * A push outcome that is not a success, as the error the library's `plugin.push` (and `list`)
 * throws: an {@link ApiError} with the outcome's code, words and headers.
 */
export function outcomeError(outcome: PushOutcome): ApiError {
  const a = outcomeAnswer(outcome) ?? errorAnswer(new Error(`push outcome ${outcome.kind} is not an error`));
  return new ApiError(a.body.code, a.body.error, a.headers);
}

/** Errors thrown by shared (domain) code, by type. */
function domainAnswer(err: unknown): ErrorAnswer | null {
  if (err instanceof CursorExpired)
    return answer('cursor_expired', err.message, { [RAW_DELETED_HEADER]: err.deletedThrough });
  if (err instanceof StoreError) {
    const a = err.retriable
      ? answer('unavailable', 'store unavailable; retry later', { 'Retry-After': '1' })
      : answer('internal', 'store error');
    return { ...a, log: { level: 'warn', fields: { err: err.message, retriable: err.retriable }, msg: 'store error' } };
  }
  if (err instanceof RedisUnavailable) {
    // A route that reached Redis while it is away: an outage, not a bug. The message never names internals.
    return {
      ...answer('unavailable', 'Redis unavailable; retry later', { 'Retry-After': '5' }),
      log: { level: 'warn', fields: { err: err.name }, msg: 'request failed: Redis unavailable' },
    };
  }
  return null;
}

/**
 * The one map: any error a route throws → its answer. `ApiError` → its code's status; `HttpError`
 * (a host app's) → its status; domain errors by type; a 4xx from Express' own middleware keeps its
 * status; anything else → 500 `internal error`, logged. Never an error's internals.
 */
export function errorAnswer(err: unknown): ErrorAnswer {
  if (err instanceof ApiError) return answer(err.code, err.message, err.headers);
  if (err instanceof HttpError)
    return answer(
      CODE_OF_STATUS[err.status] ?? (err.status >= 500 ? 'internal' : 'bad_request'),
      err.message,
      err.headers,
      err.status,
    );
  const domain = domainAnswer(err);
  if (domain) return domain;
  const status = (err as { status?: unknown } | null)?.status;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const type = (err as { type?: unknown }).type;
    const code =
      (typeof type === 'string' ? CODE_OF_EXPRESS_TYPE[type] : undefined) ?? CODE_OF_STATUS[status] ?? 'bad_request';
    return answer(code, (err as Error).message || 'bad request', {}, status);
  }
  return {
    ...answer('internal', 'internal error'),
    log: { level: 'error', fields: { err: err instanceof Error ? err.message : String(err) }, msg: 'unhandled error' },
  };
}

/** Sends an error answer as JSON. */
export function sendError(res: Response, a: ErrorAnswer): void {
  res.set(a.headers).status(a.status).json(a.body);
}

/** The two log levels the error mapping uses. */
export interface ErrorLog {
  warn(fields: Record<string, unknown>, msg: string): void;
  error(fields: Record<string, unknown>, msg: string): void;
}

/**
 * The JSON error handler (the map above), exported so a host app can put it after its own routes
 * too. Never an HTML page.
 */
export function jsonErrorHandler(log?: ErrorLog): ErrorRequestHandler {
  return function jsonErrors(err: unknown, _req: Request, res: Response, next: NextFunction): void {
    if (res.headersSent) {
      // Too late for a JSON answer (a pull stream failed midway): let Express close the connection.
      next(err);
      return;
    }
    const a = errorAnswer(err);
    if (a.log) log?.[a.log.level](a.log.fields, a.log.msg);
    sendError(res, a);
  };
}
