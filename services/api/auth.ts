import { createHash, timingSafeEqual } from 'node:crypto';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { HttpError } from '../../shared/errors.js';

/** Who is calling and with which roles: what a role resolver answers. */
export interface AuthResult {
  /** Stable caller id for rate-limit buckets and the audit log (never a secret). */
  identity: string;
  roles: readonly string[];
}

/**
 * The router's auth hook (`createSyncRouter({ roleResolver })`): resolves a request to its
 * caller. Returns null when the request carries no credentials it understands; throws
 * {@link AuthError} when it carries bad ones (answered 401 with the reason).
 */
export type RoleResolver = (req: Request) => Promise<AuthResult | null>;

/** Credentials were presented but are not valid: 401 with `message` as the reason. */
export class AuthError extends Error {
  override readonly name = 'AuthError';
}

/** Where the resolved caller is kept for later middleware (rate limits, audit). */
export function authOf(res: Response): AuthResult | null {
  return (res.locals.auth as AuthResult | undefined) ?? null;
}

/** The bearer token of `req`, or null when there is no `Authorization: Bearer` header. */
export function bearerToken(req: Request): string | null {
  const header = req.headers.authorization;
  if (!header) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return m?.[1] ?? null;
}

/** Resolves bearer tokens to roles without leaking, through timing, which token prefix matched. */
export class TokenRoles {
  private readonly entries: { digest: Buffer; roles: readonly string[]; id: string }[];

  constructor(tokens: ReadonlyMap<string, readonly string[]> = new Map()) {
    this.entries = [...tokens].map(([token, roles]) => {
      const d = digest(token);
      // The identity names the token by a digest prefix: logs and rate-limit keys never hold it.
      return { digest: d, roles, id: `token:${d.subarray(0, 6).toString('hex')}` };
    });
  }

  /** Roles of `token`, or null when unknown. Compares against every entry (constant time per entry). */
  rolesOf(token: string): readonly string[] | null {
    return this.lookup(token)?.roles ?? null;
  }

  /** The caller `token` stands for, or null when unknown. */
  lookup(token: string): AuthResult | null {
    const d = digest(token);
    let found: AuthResult | null = null;
    for (const e of this.entries) if (timingSafeEqual(d, e.digest)) found = { identity: e.id, roles: e.roles };
    return found;
  }

  get size(): number {
    return this.entries.length;
  }
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

/** The default resolver: the static bearer-token table (`ADMIN_TOKEN`, `TOKENS_FILE`). */
export function tokenRoleResolver(tokens: TokenRoles | ReadonlyMap<string, readonly string[]>): RoleResolver {
  const table = tokens instanceof TokenRoles ? tokens : new TokenRoles(tokens);
  return async function tokenResolver(req) {
    const token = bearerToken(req);
    if (!token) return null;
    const found = table.lookup(token);
    if (!found) throw new AuthError('unknown token');
    return found;
  };
}

/**
 * Tries `resolvers` in order: the first that knows the credentials answers. An AuthError is
 * thrown only if no resolver accepts the request, and it is the last one's (the most specific:
 * a JWT's "token expired" rather than the token table's "unknown token"), so a static token
 * and a JWT can both be in use.
 */
export function firstOf(...resolvers: RoleResolver[]): RoleResolver {
  return async function anyResolver(req) {
    let failure: unknown = null;
    for (const r of resolvers) {
      try {
        const got = await r(req);
        if (got) return got;
      } catch (err) {
        if (!(err instanceof AuthError)) throw err;
        failure = err;
      }
    }
    if (failure) throw failure;
    return null;
  };
}

/**
 * Middleware factory: a role list with "public" lets everyone through (a presented credential
 * is still resolved, when valid, so its identity feeds rate limits and the audit log);
 * otherwise the resolver must find a caller with one of `roles` (401 without valid
 * credentials, 403 with credentials lacking the role). The caller is kept for {@link authOf}.
 */
export function requireRoles(roles: readonly string[], auth: TokenRoles | RoleResolver, onDenied?: (status: 401 | 403) => void): RequestHandler {
  const open = roles.includes('public');
  const resolve = typeof auth === 'function' ? auth : tokenRoleResolver(auth);
  return function requireRolesMiddleware(req: Request, res: Response, next: NextFunction): void {
    if (open) {
      if (!req.headers.authorization) return next();
      resolve(req)
        .then((who) => {
          if (who) res.locals.auth = who;
        })
        // A bad credential on a public route is ignored: the request is anonymous.
        .catch(() => undefined)
        .finally(() => next());
      return;
    }
    resolve(req).then(
      (who) => {
        if (!who) {
          onDenied?.(401);
          return next(new HttpError(401, bearerToken(req) ? 'bearer token not recognised' : 'missing bearer token', { 'WWW-Authenticate': 'Bearer' }));
        }
        res.locals.auth = who;
        if (!who.roles.some((r) => roles.includes(r))) {
          onDenied?.(403);
          return next(new HttpError(403, `token lacks a required role (${roles.join(', ')})`));
        }
        next();
      },
      (err: unknown) => {
        if (err instanceof AuthError) {
          onDenied?.(401);
          return next(new HttpError(401, `invalid token: ${err.message}`, { 'WWW-Authenticate': `Bearer error="invalid_token"` }));
        }
        next(err);
      },
    );
  };
}
