import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * JSON logs carrying ids, keys and counts. Event contents never reach a log call; the
 * redaction is a second line of defence should an object with those fields slip in.
 */
export function createLogger(opts: { level: string; name: string; destination?: pino.DestinationStream }): Logger {
  return pino(
    {
      level: opts.level,
      name: opts.name,
      base: { pid: process.pid, service: opts.name },
      redact: {
        paths: [
          'distinct_id',
          'properties',
          'context',
          '*.distinct_id',
          '*.properties',
          '*.context',
          'body',
          '*.body',
          'req.headers.authorization',
        ],
        censor: '[redacted]',
      },
    },
    // Asynchronous writes: a slow reader of stdout (a pipe to a log shipper) must never stall
    // the event loop that answers pushes. Measured: per-request lines written synchronously tripled
    // push p99 under load (docs/decisions/0017-async-logs.md). Shutdown flushes (flushLogger).
    opts.destination ?? pino.destination({ dest: 1, sync: false }),
  );
}

/** Writes out buffered log lines; resolves within `ms` even if stdout is stuck. */
export async function flushLogger(logger: Logger, ms = 2000): Promise<void> {
  await new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    t.unref();
    try {
      logger.flush(() => {
        clearTimeout(t);
        resolve();
      });
    } catch {
      clearTimeout(t);
      resolve();
    }
  });
}

/** A warning that may repeat many times a second (a dependency down): see `throttledWarn`. */
export interface ThrottledWarn {
  /** Counts one occurrence; logs it unless a line went out less than the interval ago. */
  (fields?: Record<string, unknown>): void;
  /** Occurrences counted since the last line (not logged yet). */
  pending(): number;
  /**
   * Ends an episode (the dependency is back): logs `msg` at `info` with `count`, the occurrences
   * since the episode began, if there were any. The interval still holds for the next warning,
   * so a dependency that flaps (or one connection back while another still fails) stays quiet.
   */
  flush(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * Logs a repeated warning at most once per `intervalMs`: the first occurrence at once, then one
 * line per interval carrying `count`, the occurrences since the previous line (this one included).
 * A Redis that is down makes every connection retry every second or two; one line per retry
 * would bury everything else.
 */
export function throttledWarn(logger: Logger, msg: string, intervalMs = 5000): ThrottledWarn {
  let lastAt = Number.NEGATIVE_INFINITY;
  let count = 0;
  let episode = 0;
  const warn = ((fields: Record<string, unknown> = {}) => {
    count++;
    episode++;
    const now = Date.now();
    if (now - lastAt < intervalMs) return;
    logger.warn({ ...fields, count }, msg);
    lastAt = now;
    count = 0;
  }) as ThrottledWarn;
  warn.pending = () => count;
  warn.flush = (flushMsg, fields = {}) => {
    if (episode > 0) logger.info({ ...fields, count: episode }, flushMsg);
    count = 0;
    episode = 0;
  };
  return warn;
}
