import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { RAW_DELETED_HEADER } from '../../../shared/rollup/retention.js';

/** The router's `cors` option, in the reference's shape (`allowMethods`/`allowHeaders` are accepted as aliases). */
export interface CorsOptions {
  /** `*`, one origin, or a list of origins (`scheme://host[:port]`). Default `*`. */
  origin?: string | readonly string[];
  methods?: readonly string[];
  allowMethods?: readonly string[];
  headers?: readonly string[];
  allowHeaders?: readonly string[];
  exposeHeaders?: readonly string[];
  /** Seconds a browser may cache a preflight answer. Default 600. */
  maxAge?: number;
  credentials?: boolean;
}

export const DEFAULT_CORS_METHODS = ['GET', 'HEAD', 'POST', 'OPTIONS'];
/** What a browser SDK sends: JSON or compressed bodies, retries with a key, tokens, conditional pulls. */
export const DEFAULT_CORS_HEADERS = [
  'Content-Type',
  'Content-Encoding',
  'Idempotency-Key',
  'Authorization',
  'If-None-Match',
  'Range',
  'If-Range',
  'X-Starfish-Sig',
  'X-Starfish-Ts',
  'X-Starfish-Nonce',
];
/** What a browser script may read back: the pull's ETag, and the limiter's answers. */
export const DEFAULT_EXPOSE_HEADERS = [
  'ETag',
  'Content-Range',
  'Retry-After',
  'RateLimit-Limit',
  'RateLimit-Remaining',
  'RateLimit-Reset',
  'RateLimit-Policy',
  RAW_DELETED_HEADER,
];

/** `CORS_ORIGINS` (already split) to the `cors` option; undefined keeps CORS off. */
export function corsFromEnv(origins: readonly string[] | undefined): CorsOptions | undefined {
  if (!origins || origins.length === 0) return undefined;
  return { origin: origins.includes('*') ? '*' : origins };
}

/**
 * Middleware factory for CORS on the sync routes. An allowed origin gets
 * `Access-Control-Allow-Origin` (and `Vary: Origin`) on every answer, errors included, and
 * `ETag` exposed; a preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered 204
 * with the allowed methods and headers. A request from any other origin gets no CORS header,
 * so the browser blocks it. Throws at construction for `credentials` with `*`, as the
 * reference does (browsers refuse that pair anyway).
 */
export function cors(option: true | CorsOptions): RequestHandler {
  const o: CorsOptions = option === true ? {} : option;
  const origins = o.origin === undefined ? ['*'] : typeof o.origin === 'string' ? [o.origin] : [...o.origin];
  if (origins.length === 0) throw new Error('cors: origin list is empty');
  const any = origins.includes('*');
  if (o.credentials && any)
    throw new Error("CORS misconfiguration: credentials cannot be used with wildcard origin '*'; list the origins");
  const allowed = new Set(origins.map((x) => x.toLowerCase()));
  const methods = (o.methods ?? o.allowMethods ?? DEFAULT_CORS_METHODS).join(', ');
  const headers = (o.headers ?? o.allowHeaders ?? DEFAULT_CORS_HEADERS).join(', ');
  const expose = (o.exposeHeaders ?? DEFAULT_EXPOSE_HEADERS).join(', ');
  const maxAge = String(o.maxAge ?? 600);
  return function corsMiddleware(req: Request, res: Response, next: NextFunction): void {
    const origin = req.headers.origin;
    if (!any) res.vary('Origin');
    const ok = typeof origin === 'string' && (any || allowed.has(origin.toLowerCase()));
    const preflight = req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined;
    if (ok) {
      res.setHeader('Access-Control-Allow-Origin', any && !o.credentials ? '*' : origin);
      if (o.credentials) res.setHeader('Access-Control-Allow-Credentials', 'true');
    }
    if (preflight) {
      if (ok) {
        res.setHeader('Access-Control-Allow-Methods', methods);
        res.setHeader('Access-Control-Allow-Headers', headers);
        res.setHeader('Access-Control-Max-Age', maxAge);
      }
      res.status(204).end();
      return;
    }
    if (ok) res.setHeader('Access-Control-Expose-Headers', expose);
    next();
  };
}
