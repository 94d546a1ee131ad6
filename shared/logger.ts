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
    opts.destination,
  );
}
