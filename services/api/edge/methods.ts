import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { ApiError } from '../error-map.js';

/**
 * Middleware factory for the end of a route's chain: a method the route does not serve gets
 * 405 `{error}` with `Allow` (RFC 9110 §15.5.6), not a 404 that says the path does not exist.
 * `OPTIONS` is left to what follows (CORS preflights are answered before; Express lists the
 * methods otherwise).
 */
export function methodNotAllowed(methods: readonly string[]): RequestHandler {
  const allow = methods.join(', ');
  return function methodNotAllowedMiddleware(req: Request, _res: Response, next: NextFunction): void {
    if (req.method === 'OPTIONS') return next();
    next(
      new ApiError('method_not_allowed', `method ${req.method} not allowed on ${req.path}; allowed: ${allow}`, {
        Allow: allow,
      }),
    );
  };
}
