import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { ApiError, errorAnswer, sendError } from '../error-map.js';

/**
 * Middleware factory: a request not answered within `ms` gets 408 `{error}` and its connection
 * closed (the rest of a slow upload is not read). A push that times out may still be enqueued
 * by the work already under way; a client retries it with the same `Idempotency-Key` and gets
 * the first answer. Node's own `requestTimeout`/`headersTimeout` stay the outer bound.
 */
export function requestTimeout(ms: number, onTimeout?: () => void): RequestHandler {
  return function requestTimeoutMiddleware(req: Request, res: Response, next: NextFunction): void {
    if (ms <= 0) return next();
    const timer = setTimeout(() => {
      if (res.headersSent || res.writableEnded) return;
      onTimeout?.();
      res.setHeader('Connection', 'close');
      sendError(res, errorAnswer(new ApiError('request_timeout', `request not completed within ${ms} ms`)));
      // Anything the handler writes later fails on headersSent and is dropped by the error handler.
      res.once('finish', () => req.socket.destroySoon());
    }, ms);
    timer.unref();
    const clear = (): void => clearTimeout(timer);
    res.once('finish', clear);
    res.once('close', clear);
    next();
  };
}
