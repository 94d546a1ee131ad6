import { createHash, timingSafeEqual } from 'node:crypto';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { ApiError } from './error-map.js';

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

/** What the `Authorization` header holds: nothing, one bearer token, or something else (with why it is not a bearer token). */
export type Credentials = { kind: 'none' } | { kind: 'bearer'; token: string } | { kind: 'other'; reason: string };

/**
 * Schemes named back to the client when refused (the IANA HTTP authentication scheme registry,
 * lower-cased, and Starfish's `Cap`). Anything else is not echoed: a header without a scheme
 * (`Authorization: <token>`, the scheme forgotten) has the credential itself where the scheme
 * goes, and an answer naming it would copy the secret into client logs, proxies and screenshots.
 */
const KNOWN_SCHEMES = new Map(
  [
    'Basic',
    'Digest',
    'Negotiate',
    'NTLM',
    'HOBA',
    'Mutual',
    'OAuth',
    'SCRAM-SHA-1',
    'SCRAM-SHA-256',
    'vapid',
    'DPoP',
    'GNAP',
    'PrivateToken',
    'Concealed',
    'AWS4-HMAC-SHA256',
    'Token',
    'Cap',
  ].map((s) => [s.toLowerCase(), s]),
);

/**
 * Reads the `Authorization` header. The reason of `other` names a registered scheme at most
 * (in its registered spelling), never the credentials: `Basic …` is "Authorization scheme Basic is not supported; use Bearer",
 * `Bearer a b` and a bare `Bearer` are malformed bearer tokens.
 */
export function credentialsOf(req: Request): Credentials {
  const header = req.headers.authorization?.trim();
  if (!header) return { kind: 'none' };
  const [scheme = '', ...rest] = header.split(/[ \t]+/);
  if (scheme.toLowerCase() === 'bearer') {
    if (rest.length === 1 && rest[0]) return { kind: 'bearer', token: rest[0] };
    return {
      kind: 'other',
      reason:
        rest.length === 0
          ? 'malformed bearer token: no token after "Bearer"'
          : `malformed bearer token: one token expected after "Bearer", got ${rest.length} parts`,
    };
  }
  const known = KNOWN_SCHEMES.get(scheme.toLowerCase());
  if (known === undefined)
    return { kind: 'other', reason: 'malformed Authorization header: expected "Bearer <token>"' };
  return { kind: 'other', reason: `Authorization scheme ${known} is not supported; use Bearer` };
}

/** The bearer token of `req`, or null when there is no well-formed `Authorization: Bearer <token>` header. */
export function bearerToken(req: Request): string | null {
  const c = credentialsOf(req);
  return c.kind === 'bearer' ? c.token : null;
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

/** Why a request was refused by {@link authenticate}, kept for {@link authorize}. */
interface AuthRefusal {
  error: unknown;
  /** 401 or 403 for a refusal by auth; absent for another failure (a key server down: 503). */
  status?: 401 | 403;
}

const REFUSAL = 'authRefusal';

/**
 * Middleware factory, the first half of {@link requireRoles}: resolves the caller and keeps it
 * for {@link authOf}, or keeps the refusal without answering it, so that middleware between
 * the two halves (the rate limiter) sees every request, refused ones included. A role list with
 * "public" lets everyone through (a presented credential is still resolved, when valid, so its
 * identity feeds rate limits and the audit log); otherwise the resolver must find a caller with
 * one of `roles` (401 without valid credentials, with the exact reason; 403 with credentials
 * lacking the role).
 */
export function authenticate(roles: readonly string[], auth: TokenRoles | RoleResolver): RequestHandler {
  const open = roles.includes('public');
  const resolve = typeof auth === 'function' ? auth : tokenRoleResolver(auth);
  return function authenticateMiddleware(req: Request, res: Response, next: NextFunction): void {
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
    const refuse = (r: AuthRefusal): void => {
      res.locals[REFUSAL] = r;
      next();
    };
    resolve(req).then(
      (who) => {
        if (!who) {
          const c = credentialsOf(req);
          const reason =
            c.kind === 'none' ? 'missing bearer token' : c.kind === 'bearer' ? 'bearer token not recognised' : c.reason;
          return refuse({
            status: 401,
            error: new ApiError('unauthorized', reason, {
              'WWW-Authenticate': c.kind === 'other' ? 'Bearer error="invalid_request"' : 'Bearer',
            }),
          });
        }
        res.locals.auth = who;
        if (!who.roles.some((r) => roles.includes(r)))
          return refuse({
            status: 403,
            error: new ApiError('forbidden', `token lacks a required role (${roles.join(', ')})`),
          });
        next();
      },
      (err: unknown) => {
        if (err instanceof AuthError)
          return refuse({
            status: 401,
            error: new ApiError('unauthorized', `invalid token: ${err.message}`, {
              'WWW-Authenticate': `Bearer error="invalid_token"`,
            }),
          });
        refuse({ error: err });
      },
    );
  };
}

/** Middleware factory, the second half of {@link requireRoles}: answers the refusal {@link authenticate} kept, if any. */
export function authorize(onDenied?: (status: 401 | 403) => void): RequestHandler {
  return function authorizeMiddleware(_req: Request, res: Response, next: NextFunction): void {
    const refusal = res.locals[REFUSAL] as AuthRefusal | undefined;
    if (!refusal) return next();
    if (refusal.status) onDenied?.(refusal.status);
    next(refusal.error);
  };
}

/**
 * Middleware factory: {@link authenticate} then {@link authorize}, for routes with nothing to
 * run between them. The caller is kept for {@link authOf}.
 */
export function requireRoles(
  roles: readonly string[],
  auth: TokenRoles | RoleResolver,
  onDenied?: (status: 401 | 403) => void,
): RequestHandler {
  const first = authenticate(roles, auth);
  const second = authorize(onDenied);
  return function requireRolesMiddleware(req: Request, res: Response, next: NextFunction): void {
    first(req, res, (err?: unknown) => (err ? next(err) : second(req, res, next)));
  };
}
