import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Logger } from '../../../shared/logger.js';
import { authOf } from '../auth.js';

/** One audited request: who did what to which prefix, and the answer. Never a body or event field. */
export interface AuditEntry {
  timestamp: number;
  action: 'push' | 'list' | 'pull' | 'admin';
  /** The route pattern (e.g. `/pull/events/:app/:batchId`), not the raw URL. */
  route: string;
  method: string;
  collection: string | null;
  /** Path parameters (ids such as `app` and `batchId`, checked against `[A-Za-z0-9._~-]`). */
  params: Record<string, string>;
  identity: string | null;
  status: number;
  ms: number;
}

/** The router's `auditLogger` option: anything that records entries. */
export interface AuditLogger {
  record(entry: AuditEntry): void;
}

/** The default audit logger: one pino line per entry (`"msg":"audit"`) on the service's logger. */
export function pinoAuditLogger(logger: Logger): AuditLogger {
  const child = logger.child({ audit: true });
  return { record: (entry) => child.info(entry, 'audit') };
}

const SAFE_PARAM = /^[A-Za-z0-9._~-]{1,128}$/;

/** Middleware factory: records one entry when the response is finished (or the client went away). */
export function audit(action: AuditEntry['action'], collection: string | null, logger: AuditLogger): RequestHandler {
  return function auditMiddleware(req: Request, res: Response, next: NextFunction): void {
    const t0 = performance.now();
    // Read now: Express resets params and route once the request leaves the router.
    const params: Record<string, string> = {};
    for (const [k, v] of Object.entries((req.params ?? {}) as Record<string, string | undefined>))
      if (typeof v === 'string' && SAFE_PARAM.test(v)) params[k] = v;
    const route = `${req.baseUrl}${req.route ? String((req.route as { path: unknown }).path) : req.path}`;
    let done = false;
    const record = (): void => {
      if (done) return;
      done = true;
      logger.record({
        timestamp: Date.now(),
        action,
        route,
        method: req.method,
        collection,
        params,
        identity: authOf(res)?.identity ?? null,
        status: res.writableFinished ? res.statusCode : 499,
        ms: Math.round(performance.now() - t0),
      });
    };
    res.once('finish', record);
    res.once('close', record);
    next();
  };
}
