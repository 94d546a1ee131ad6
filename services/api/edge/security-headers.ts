import type { NextFunction, Request, RequestHandler, Response } from 'express';

/** The router's `securityHeaders` option: `true` (default) or per-header switches. */
export interface SecurityHeadersOptions {
  /** `X-Content-Type-Options` value, or false to leave it out. Default `nosniff`. */
  contentTypeOptions?: string | false;
  /** `Cache-Control: no-store` on every 4xx/5xx answer, so a proxy never caches an error. Default true. */
  noStoreOnErrors?: boolean;
}

/**
 * Middleware factory: `X-Content-Type-Options: nosniff` on every answer, `Cache-Control:
 * no-store` on errors (set when the status is known, just before the headers go out), and no
 * `X-Powered-By` even in a host app that did not disable it.
 */
export function securityHeaders(option: true | SecurityHeadersOptions = true): RequestHandler {
  const o: SecurityHeadersOptions = option === true ? {} : option;
  const cto = o.contentTypeOptions ?? 'nosniff';
  const noStore = o.noStoreOnErrors ?? true;
  return function securityHeadersMiddleware(_req: Request, res: Response, next: NextFunction): void {
    res.removeHeader('X-Powered-By');
    if (cto !== false) res.setHeader('X-Content-Type-Options', cto);
    if (noStore) {
      const writeHead = res.writeHead;
      // The status is final only when the headers are written; a handler may have set a
      // long-lived Cache-Control before it failed (pull), which an error must not keep.
      res.writeHead = function writeHeadWithNoStore(this: Response, ...args: Parameters<Response['writeHead']>) {
        const status = typeof args[0] === 'number' ? args[0] : this.statusCode;
        if (status >= 400) this.setHeader('Cache-Control', 'no-store');
        return writeHead.apply(this, args);
      } as Response['writeHead'];
    }
    next();
  };
}
