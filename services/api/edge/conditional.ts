import type { NextFunction, Request, Response } from 'express';

/**
 * Middleware: Express answers no conditional request on its own. Its `res.send` turns any GET
 * whose `req.fresh` holds into an empty 304, and `If-None-Match: *` (or an `If-Modified-Since`
 * with a Last-Modified set) makes `req.fresh` hold whatever the answer is: `/list`,
 * `/admin/failed`, `/healthz` and the empty answer for a missing batch became bodiless 304s.
 * Only a route with a representation to validate answers 304, and it does so itself (pull of
 * an existing batch compares `If-None-Match` with the file's ETag). Whatever a host app's
 * `etag` setting, so the router behaves the same in any app.
 */
export function noImplicitConditional(req: Request, _res: Response, next: NextFunction): void {
  // An own property shadows Express' getter on the request prototype, for this request only.
  Object.defineProperty(req, 'fresh', { value: false, configurable: true, enumerable: true });
  next();
}
