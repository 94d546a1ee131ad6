/**
 * One error type for every side-effect adapter (object stores, Redis helpers).
 * `retriable` tells the encoder whether a BullMQ retry can help; the HTTP layer
 * maps it to 503 (retriable) or 500 (not) without leaking `cause`.
 */
export class StoreError extends Error {
  override readonly name = 'StoreError';
  readonly retriable: boolean;
  constructor(message: string, opts: { retriable: boolean; cause?: unknown }) {
    super(message, { cause: opts.cause });
    this.retriable = opts.retriable;
  }
}

/** An error with an HTTP status, thrown by middleware and mapped by the error handler. */
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
