import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Cluster, Redis } from 'ioredis';
import type { Registry } from 'prom-client';
import type { Env } from '../../../shared/config.js';
import type { Logger } from '../../../shared/logger.js';
import { type RoleResolver, type TokenRoles, firstOf, tokenRoleResolver } from '../auth.js';
import type { RouterObserver, SyncRouterOptions } from '../router.js';
import { audit, pinoAuditLogger } from './audit.js';
import { corsFromEnv } from './cors.js';
import { createJwtRoleResolver } from './jwt.js';
import { createEdgeMetrics } from './metrics.js';

/** The environment variables of the edge. */
export type EdgeEnv = Pick<
  Env,
  | 'QUEUE_NAME'
  | 'CORS_ORIGINS'
  | 'TRUSTED_PROXY_HOPS'
  | 'REQUEST_TIMEOUT_MS'
  | 'RATE_LIMIT_PUSH_ON_ERROR'
  | 'AUDIT_PUSH'
  | 'JWT_JWKS_URL'
  | 'JWT_PUBLIC_KEY'
  | 'JWT_ISSUER'
  | 'JWT_AUDIENCE'
  | 'JWT_ROLES_CLAIM'
>;

/** The role resolver the service uses: the token table, then JWTs when JWT_JWKS_URL or JWT_PUBLIC_KEY is set. */
export function resolverFromEnv(env: Partial<EdgeEnv>, tokens: TokenRoles): RoleResolver {
  const table = tokenRoleResolver(tokens);
  if (!env.JWT_JWKS_URL && !env.JWT_PUBLIC_KEY) return table;
  const jwt = createJwtRoleResolver({ jwksUrl: env.JWT_JWKS_URL, publicKey: env.JWT_PUBLIC_KEY, issuer: env.JWT_ISSUER, audience: env.JWT_AUDIENCE, rolesClaim: env.JWT_ROLES_CLAIM });
  return firstOf(table, jwt);
}

/**
 * The service's edge, from its environment: router options (auth, CORS, timeouts, audit, rate
 * limits on the producer Redis), the observer hooks feeding the edge metrics, and the audit
 * middleware of the admin routes.
 */
export function edgeFromEnv(
  env: Partial<EdgeEnv>,
  deps: { tokens: TokenRoles; redis: Redis | Cluster; registry: Registry; logger: Logger },
): { routerOptions: Partial<SyncRouterOptions> & { roleResolver: RoleResolver }; observer: RouterObserver; adminAudit: RequestHandler } {
  const metrics = createEdgeMetrics(deps.registry);
  const auditLogger = pinoAuditLogger(deps.logger);
  const adminAuditOne = audit('admin', null, auditLogger);
  return {
    routerOptions: {
      roleResolver: resolverFromEnv(env, deps.tokens),
      cors: corsFromEnv(env.CORS_ORIGINS),
      requestTimeoutMs: env.REQUEST_TIMEOUT_MS ?? 0,
      auditLogger,
      auditPush: env.AUDIT_PUSH === 'on',
      rateLimitStore: deps.redis,
      rateLimitKeyPrefix: `ingest-rl:${env.QUEUE_NAME ?? 'events-ingest'}`,
      trustedProxyHops: env.TRUSTED_PROXY_HOPS ?? 0,
      rateLimitPushOnError: env.RATE_LIMIT_PUSH_ON_ERROR ?? 'open',
    },
    observer: {
      rateLimited: (action, rule) => metrics.rateLimited.inc({ action, rule }),
      rateLimitStoreFailed: (action, outcome) => metrics.rateLimitStoreErrors.inc({ action, outcome }),
      rateLimitCheckSeconds: (s) => metrics.rateLimitCheck.observe(s),
      timedOut: () => metrics.requestTimeouts.inc(),
      authDenied: (status) => metrics.authFailures.inc({ status: String(status) }),
    },
    adminAudit: function adminAudit(req: Request, res: Response, next: NextFunction) {
      if (!req.path.startsWith('/admin/')) return next();
      adminAuditOne(req, res, next);
    },
  };
}
