/**
 * One error type for every side-effect adapter (object stores, Redis helpers).
 * `retriable` tells the encoder whether a BullMQ retry can help; the HTTP layer's
 * error map (services/api/error-map.ts) answers it without leaking `cause`.
 */
export class StoreError extends Error {
  override readonly name = 'StoreError';
  readonly retriable: boolean;
  constructor(message: string, opts: { retriable: boolean; cause?: unknown }) {
    super(message, { cause: opts.cause });
    this.retriable = opts.retriable;
  }
}

/**
 * Redis could not be reached, or could not serve a command right now (connection refused or lost,
 * a command timeout, a cluster mid-failover). Made only by `asRedisUnavailable` in
 * shared/redis/connection.ts, the one place that reads the driver's error shapes; `cause` is the driver's
 * error and the message is its message. `neverRan`: the command certainly did not run (it never
 * left this process, or Redis refused it before running it), so undoing its intended effect is
 * safe; `false` means unknown, not "it ran".
 */
export class RedisUnavailable extends Error {
  override readonly name = 'RedisUnavailable';
  readonly neverRan: boolean;
  constructor(message: string, opts: { neverRan: boolean; cause?: unknown }) {
    super(message, { cause: opts.cause });
    this.neverRan = opts.neverRan;
  }
}

/**
 * A call did not settle in time (shared/timeout.ts `withTimeout`). The call itself may still
 * finish later: a timed-out write may have happened.
 */
export class TimeoutError extends Error {
  override readonly name = 'TimeoutError';
  /** What timed out (`enqueue`, `admin call`, …); empty when the caller did not say. */
  readonly what: string;
  readonly afterMs: number;
  constructor(what: string | undefined, afterMs: number) {
    super(`${what ? `${what} ` : ''}timed out after ${afterMs} ms`);
    this.what = what ?? '';
    this.afterMs = afterMs;
  }
}

/** A bad setting: the process stops at start with a message naming the field. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}
