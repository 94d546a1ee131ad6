import { createHash, timingSafeEqual } from 'node:crypto';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { HttpError } from '../../shared/errors.js';

/** Resolves bearer tokens to roles without leaking, through timing, which token prefix matched. */
export class TokenRoles {
  private readonly entries: { digest: Buffer; roles: readonly string[] }[];

  constructor(tokens: ReadonlyMap<string, readonly string[]> = new Map()) {
    this.entries = [...tokens].map(([token, roles]) => ({ digest: digest(token), roles }));
  }

  /** Roles of `token`, or null when unknown. Compares against every entry (constant time per entry). */
  rolesOf(token: string): readonly string[] | null {
    const d = digest(token);
    let found: readonly string[] | null = null;
    for (const e of this.entries) if (timingSafeEqual(d, e.digest)) found = e.roles;
    return found;
  }
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

/**
 * Middleware factory: a role list with "public" lets everyone through; otherwise a bearer token
 * with one of `roles` is needed (401 without a known token, 403 with a token lacking the role).
 */
export function requireRoles(roles: readonly string[], tokens: TokenRoles, onDenied?: (status: 401 | 403) => void): RequestHandler {
  const open = roles.includes('public');
  return function requireRolesMiddleware(req: Request, _res: Response, next: NextFunction): void {
    if (open) return next();
    const header = req.headers.authorization ?? '';
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!m || !m[1]) {
      onDenied?.(401);
      return next(new HttpError(401, 'missing bearer token', { 'WWW-Authenticate': 'Bearer' }));
    }
    const have = tokens.rolesOf(m[1]);
    if (!have) {
      onDenied?.(401);
      return next(new HttpError(401, 'unknown token', { 'WWW-Authenticate': 'Bearer error="invalid_token"' }));
    }
    if (!have.some((r) => roles.includes(r))) {
      onDenied?.(403);
      return next(new HttpError(403, `token lacks a required role (${roles.join(', ')})`));
    }
    next();
  };
}
