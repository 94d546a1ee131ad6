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
        paths: ['distinct_id', 'properties', 'context', '*.distinct_id', '*.properties', '*.context', 'body', '*.body', 'req.headers.authorization'],
        censor: '[redacted]',
      },
    },
    // Asynchronous writes: a slow reader of stdout (a pipe to a log shipper) must never stall
    // the event loop that answers pushes. Measured: per-request lines written synchronously tripled
    // push p99 under load (docs/performance.md). Shutdown flushes (flushLogger).
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
