import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Cluster, Redis } from 'ioredis';
import type { Registry } from 'prom-client';
import {
  QUEUE_NAME_DEFAULT,
  RATE_LIMIT_PUSH_ON_ERROR_DEFAULT,
  TRUSTED_PROXY_HOPS_DEFAULT,
  loadCapRevocations,
  loadCapRoles,
} from '../../shared/config.js';
import type { EdgeSlice } from '../../shared/config-slices.js';
import { capNonceKeyPrefix, rateLimitKeyPrefix } from '../../shared/redis/keyspace.js';
import type { Logger } from '../../shared/logger.js';
import { type RoleResolver, type TokenRoles, firstOf, tokenRoleResolver } from './auth.js';
import type { RouterObserver, SyncRouterOptions } from './router.js';
import { audit, pinoAuditLogger } from './edge/audit.js';
import { corsFromEnv } from './edge/cors.js';
import { createJwtRoleResolver } from './edge/jwt.js';
import { createEdgeMetrics } from './edge/metrics.js';
import { createCapAuthMetrics } from './metrics.js';
import { RedisNonceStore, capOrElse, createCapRoleResolver } from './edge/cap-auth.js';

/** The environment variables of the edge. */
export type EdgeEnv = EdgeSlice;

/**
 * With CAP_AUTH=on, `others` behind the cap-cert resolver (a `Cap` credential goes to it, a
 * Bearer one to `others`): nonces in the producer Redis under `ingest-cap:<QUEUE_NAME>:n`, roles
 * for CAP_ADMINS and TOKENS_FILE's `capUserId` entries. Otherwise `others` unchanged.
 */
export function withCapAuthFromEnv(
  env: Partial<EdgeEnv>,
  deps: {
    redis: Redis | Cluster;
    registry: Registry;
    logger?: Logger;
    collections?: readonly { name: string; storagePath: string }[];
  },
  others: RoleResolver,
): RoleResolver {
  if (env.CAP_AUTH !== 'on') return others;
  const metrics = createCapAuthMetrics(deps.registry);
  const cap = createCapRoleResolver({
    nonceStore: new RedisNonceStore(deps.redis, capNonceKeyPrefix(env.QUEUE_NAME ?? QUEUE_NAME_DEFAULT)),
    identityRoles: loadCapRoles({ CAP_AUTH: 'on', CAP_ADMINS: env.CAP_ADMINS, TOKENS_FILE: env.TOKENS_FILE }),
    revocations: loadCapRevocations({ CAP_REVOCATIONS_FILE: env.CAP_REVOCATIONS_FILE }),
    collections: deps.collections,
    observer: {
      outcome: (o) => metrics.outcomes.inc({ outcome: o }),
      verifySeconds: (s) => metrics.verify.observe(s),
      loadFailed: (err) =>
        deps.logger?.error(
          { err: err instanceof Error ? err.message : String(err) },
          'CAP_AUTH=on but cap auth cannot start: every cap-signed request gets 500',
        ),
    },
  });
  return capOrElse(cap, others);
}

/** The role resolver the service uses: the token table, then JWTs when JWT_JWKS_URL or JWT_PUBLIC_KEY is set. */
export function resolverFromEnv(env: Partial<EdgeEnv>, tokens: TokenRoles): RoleResolver {
  const table = tokenRoleResolver(tokens);
  if (!env.JWT_JWKS_URL && !env.JWT_PUBLIC_KEY) return table;
  const jwt = createJwtRoleResolver({
    jwksUrl: env.JWT_JWKS_URL,
    publicKey: env.JWT_PUBLIC_KEY,
    issuer: env.JWT_ISSUER,
    audience: env.JWT_AUDIENCE,
    rolesClaim: env.JWT_ROLES_CLAIM,
    allowNoExp: env.JWT_ALLOW_NO_EXP === 'on',
  });
  return firstOf(table, jwt);
}

/**
 * What is weak in the JWT settings, for a start-up warning: without `JWT_ISSUER` (`JWT_AUDIENCE`)
 * a token from any issuer (for any audience) signed by these keys is accepted, e.g. one minted
 * for another service of the same identity provider. Empty when JWT auth is off.
 */
export function jwtWarnings(env: Partial<EdgeEnv>): string[] {
  if (!env.JWT_JWKS_URL && !env.JWT_PUBLIC_KEY) return [];
  return (['JWT_ISSUER', 'JWT_AUDIENCE'] as const).filter((k) => !env[k]);
}

/**
 * The service's edge, from its environment: router options (auth, CORS, timeouts, audit, rate
 * limits on the producer Redis), the observer hooks feeding the edge metrics, and the audit
 * middleware of the admin routes.
 */
export function edgeFromEnv(
  env: Partial<EdgeEnv>,
  deps: {
    tokens: TokenRoles;
    redis: Redis | Cluster;
    registry: Registry;
    logger: Logger;
    collections?: readonly { name: string; storagePath: string }[];
  },
): {
  routerOptions: Partial<SyncRouterOptions> & { roleResolver: RoleResolver };
  observer: RouterObserver;
  adminAudit: RequestHandler;
} {
  const unset = jwtWarnings(env);
  if (unset.length > 0) {
    deps.logger.warn(
      { unset },
      `JWT auth is on without ${unset.join(' and ')}: any token signed by the configured keys is accepted whatever its ${unset.map((k) => (k === 'JWT_ISSUER' ? 'issuer' : 'audience')).join(' or ')}`,
    );
  }
  const metrics = createEdgeMetrics(deps.registry);
  const auditLogger = pinoAuditLogger(deps.logger);
  const adminAuditOne = audit('admin', null, auditLogger);
  return {
    routerOptions: {
      roleResolver: withCapAuthFromEnv(env, deps, resolverFromEnv(env, deps.tokens)),
      cors: corsFromEnv(env.CORS_ORIGINS),
      requestTimeoutMs: env.REQUEST_TIMEOUT_MS ?? 0,
      auditLogger,
      auditPush: env.AUDIT_PUSH === 'on',
      rateLimitStore: deps.redis,
      rateLimitKeyPrefix: rateLimitKeyPrefix(env.QUEUE_NAME ?? QUEUE_NAME_DEFAULT),
      trustedProxyHops: env.TRUSTED_PROXY_HOPS ?? TRUSTED_PROXY_HOPS_DEFAULT,
      rateLimitPushOnError: env.RATE_LIMIT_PUSH_ON_ERROR ?? RATE_LIMIT_PUSH_ON_ERROR_DEFAULT,
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
