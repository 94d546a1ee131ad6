import { type KeyObject, createPublicKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { type JWTPayload, createRemoteJWKSet, errors, jwtVerify } from 'jose';
import { HttpError } from '../../../shared/errors.js';
import { AuthError, type RoleResolver, bearerToken } from '../auth.js';

/** Signature algorithms a JWT may use: asymmetric only, so a public key can never double as an HMAC secret, and never `none`. */
export const JWT_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];

export interface JwtResolverOptions {
  /** A JWKS endpoint (keys are fetched and cached by jose, refreshed on an unknown `kid`). */
  jwksUrl?: string;
  /** A PEM public key (SPKI), or a KeyObject. */
  publicKey?: string | KeyObject;
  issuer?: string;
  audience?: string;
  /** Claim with the roles: an array or a space-separated string; dots walk into objects (`realm_access.roles`). Default `roles`. */
  rolesClaim?: string;
  /** Clock tolerance for exp/nbf, in seconds (default 5). */
  clockToleranceSeconds?: number;
}

/** Reads JWT_PUBLIC_KEY: PEM text as is, anything else as a path to a PEM file. */
export function loadPublicKey(value: string): KeyObject {
  const pem = value.includes('-----BEGIN') ? value : readFileSync(value, 'utf8');
  return createPublicKey(pem);
}

function claimAt(payload: JWTPayload, path: string): unknown {
  let cur: unknown = payload;
  for (const part of path.split('.')) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[part];
  }
  return cur;
}

function rolesFrom(payload: JWTPayload, claim: string): string[] {
  const v = claimAt(payload, claim);
  if (Array.isArray(v)) return v.filter((r): r is string => typeof r === 'string' && r.length > 0);
  if (typeof v === 'string') return v.split(/\s+/).filter(Boolean);
  return [];
}

/** Why a token was refused, in words a client can act on (never the token). */
function reasonOf(err: unknown): string {
  if (err instanceof errors.JWTExpired) return 'token expired';
  if (err instanceof errors.JWTClaimValidationFailed) return `claim "${err.claim}" check failed (${err.reason})`;
  if (err instanceof errors.JOSEAlgNotAllowed) return 'signature algorithm not allowed';
  if (err instanceof errors.JWSSignatureVerificationFailed) return 'signature verification failed';
  if (err instanceof errors.JWKSNoMatchingKey) return 'no key in the JWKS matches the token';
  if (err instanceof errors.JOSEError) return `malformed token (${err.code})`;
  return 'malformed token';
}

/**
 * A role resolver for JWT bearer tokens, verified with `jose` against a JWKS URL or one public
 * key, with the configured issuer and audience. Identity is the `sub` claim. Tokens that are
 * not JWTs (no two dots) are left to other resolvers.
 */
export function createJwtRoleResolver(opts: JwtResolverOptions): RoleResolver {
  if (!opts.jwksUrl && !opts.publicKey) throw new Error('the JWT resolver needs jwksUrl or publicKey');
  const key = opts.jwksUrl
    ? createRemoteJWKSet(new URL(opts.jwksUrl), { timeoutDuration: 3000, cooldownDuration: 30_000 })
    : typeof opts.publicKey === 'string'
      ? loadPublicKey(opts.publicKey)
      : (opts.publicKey as KeyObject);
  const rolesClaim = opts.rolesClaim ?? 'roles';
  const verifyOptions = {
    algorithms: JWT_ALGORITHMS,
    issuer: opts.issuer,
    audience: opts.audience,
    clockTolerance: opts.clockToleranceSeconds ?? 5,
  };
  return async function jwtResolver(req) {
    const token = bearerToken(req);
    if (!token || token.split('.').length !== 3) return null;
    let payload: JWTPayload;
    try {
      // Two calls because jose's overloads take a key or a key getter, not their union.
      payload = (typeof key === 'function' ? await jwtVerify(token, key, verifyOptions) : await jwtVerify(token, key, verifyOptions)).payload;
    } catch (err) {
      // The key server being slow or down is not the client's fault.
      if (err instanceof errors.JWKSTimeout || (err instanceof Error && !(err instanceof errors.JOSEError) && opts.jwksUrl)) {
        throw new HttpError(503, 'cannot fetch the JWT signing keys; retry later', { 'Retry-After': '5' });
      }
      throw new AuthError(reasonOf(err));
    }
    if (typeof payload.sub !== 'string' || payload.sub === '') throw new AuthError('token has no "sub" claim');
    return { identity: `jwt:${payload.sub}`, roles: rolesFrom(payload, rolesClaim) };
  };
}
