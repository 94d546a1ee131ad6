import { type KeyObject, createPublicKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { type JWTPayload, type JWTVerifyGetKey, createLocalJWKSet, createRemoteJWKSet, errors, jwtVerify } from 'jose';
import { ApiError } from '../error-map.js';
import { JWT_ROLES_CLAIM_DEFAULT } from '../../../shared/config.js';
import { AuthError, type RoleResolver, bearerToken } from '../auth.js';

/** Signature algorithms a JWT may use: asymmetric only, so a public key can never double as an HMAC secret, and never `none`. */
export const JWT_ALGORITHMS = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
];

export interface JwtResolverOptions {
  /** A JWKS endpoint (keys are fetched and cached, refreshed on an unknown `kid`; see {@link jwksKeySource}). */
  jwksUrl?: string;
  /** A PEM public key (SPKI), or a KeyObject. */
  publicKey?: string | KeyObject;
  issuer?: string;
  audience?: string;
  /** Claim with the roles: an array or a space-separated string; dots walk into objects (`realm_access.roles`). Default `roles`. */
  rolesClaim?: string;
  /** Clock tolerance for exp/nbf, in seconds (default 5). */
  clockToleranceSeconds?: number;
  /** Accept tokens without `exp` (they never expire). Default false: such a token is refused (JWT_ALLOW_NO_EXP). */
  allowNoExp?: boolean;
  /** JWKS fetch bounds; defaults {@link JWKS_TIMEOUT_MS} and {@link JWKS_FAILURE_COOLDOWN_MS}. */
  jwks?: { timeoutMs?: number; failureCooldownMs?: number };
}

/** A JWKS fetch that has not answered by then counts as failed. */
export const JWKS_TIMEOUT_MS = 3000;
/**
 * After a failed JWKS fetch, no new fetch for this long: a key server that is down gets one
 * request per process per cooldown, not one per client request. Tokens that need keys the
 * process does not have are answered 503 meanwhile, with `Retry-After` = the time left.
 */
export const JWKS_FAILURE_COOLDOWN_MS = 5000;
/** Keys are fetched again after this long, and at most this often for an unknown `kid`. */
const JWKS_MAX_AGE_MS = 600_000;
const JWKS_KID_COOLDOWN_MS = 30_000;

/** The key server could not give keys (5xx, not JSON, not a key set, unreachable, too slow): 503 + `Retry-After`, never a 401. */
export class JwksUnavailableError extends Error {
  override readonly name = 'JwksUnavailableError';
  constructor(
    readonly detail: string,
    readonly retryAfterSeconds: number,
    options?: { cause?: unknown },
  ) {
    super(`cannot fetch the JWT signing keys (${detail}); retry later`, options);
  }
}

/** What went wrong with a JWKS fetch, from jose's error types and codes (never its message text). */
function fetchFailure(err: unknown, timeoutMs: number): string {
  if (err instanceof errors.JWKSTimeout) return `no answer within ${timeoutMs} ms`;
  if (err instanceof errors.JWKSInvalid) return 'the answer is not a JSON Web Key Set';
  // jose's generic error is thrown only by the fetch itself: a status other than 200, or a body that is not JSON.
  if (err instanceof errors.JOSEError) return `bad answer from the key server (${err.code})`;
  return 'key server unreachable';
}

/**
 * The key getter for a JWKS URL. jose's remote key set fetches (one fetch at a time, with a
 * timeout); this wrapper decides when: when it holds no keys or keys older than 10 min, and on
 * an unknown `kid` at most every 30 s. A failed fetch starts a cooldown of `failureCooldownMs`
 * with no fetch at all; meanwhile keys already held (even old ones) keep verifying tokens, and a
 * token no held key can verify gets {@link JwksUnavailableError}.
 */
export function jwksKeySource(url: URL, o: { timeoutMs?: number; failureCooldownMs?: number } = {}): JWTVerifyGetKey {
  const timeoutMs = o.timeoutMs ?? JWKS_TIMEOUT_MS;
  const cooldownMs = o.failureCooldownMs ?? JWKS_FAILURE_COOLDOWN_MS;
  // Only jose's fetch is used (reload, jwks); lookups go to `local`, so jose's own refetch policy never runs.
  const remote = createRemoteJWKSet(url, { timeoutDuration: timeoutMs });
  let local: JWTVerifyGetKey | undefined;
  let fetchedAt = -Infinity;
  let failedAt = -Infinity;
  /** Fetches the key set unless a failure is cooling down; throws JwksUnavailableError when it could not. */
  const refresh = async (): Promise<void> => {
    const left = failedAt + cooldownMs - Date.now();
    if (left > 0) throw new JwksUnavailableError('the last fetch failed', Math.ceil(left / 1000));
    try {
      await remote.reload();
      const jwks = remote.jwks();
      if (!jwks) throw new errors.JWKSInvalid();
      local = createLocalJWKSet(jwks);
      fetchedAt = Date.now();
    } catch (err) {
      failedAt = Date.now();
      throw new JwksUnavailableError(fetchFailure(err, timeoutMs), Math.ceil(cooldownMs / 1000), { cause: err });
    }
  };
  return async function jwksKey(header, token) {
    if (!local || Date.now() - fetchedAt > JWKS_MAX_AGE_MS) {
      // Old keys stay in use while the key server is away; no keys at all is a 503.
      await refresh().catch((err: unknown) => {
        if (!local) throw err;
      });
    }
    const held = local as JWTVerifyGetKey;
    try {
      return await held(header, token);
    } catch (err) {
      // A new kid: the key server may have rotated its keys. Fetch again, at most every 30 s.
      if (!(err instanceof errors.JWKSNoMatchingKey) || Date.now() - fetchedAt < JWKS_KID_COOLDOWN_MS) throw err;
      await refresh();
      return (local as JWTVerifyGetKey)(header, token);
    }
  };
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
  if (err instanceof errors.JWTClaimValidationFailed && err.claim === 'exp' && err.reason === 'missing')
    return 'token has no "exp" claim (tokens must expire)';
  if (err instanceof errors.JWTClaimValidationFailed) return `claim "${err.claim}" check failed (${err.reason})`;
  if (err instanceof errors.JOSEAlgNotAllowed) return 'signature algorithm not allowed';
  if (err instanceof errors.JWSSignatureVerificationFailed) return 'signature verification failed';
  if (err instanceof errors.JWKSNoMatchingKey) return 'no key in the JWKS matches the token';
  if (err instanceof errors.JOSEError) return `malformed token (${err.code})`;
  return 'malformed token';
}

/**
 * A role resolver for JWT bearer tokens, verified with `jose` against a JWKS URL or one public
 * key, with the configured issuer and audience; `exp` is required unless `allowNoExp`. Identity
 * is the `sub` claim. Tokens that are not JWTs (no two dots) are left to other resolvers. A key
 * server that cannot give keys is a 503 + `Retry-After`, not a bad token.
 */
export function createJwtRoleResolver(opts: JwtResolverOptions): RoleResolver {
  if (!opts.jwksUrl && !opts.publicKey) throw new Error('the JWT resolver needs jwksUrl or publicKey');
  const key = opts.jwksUrl
    ? jwksKeySource(new URL(opts.jwksUrl), opts.jwks)
    : typeof opts.publicKey === 'string'
      ? loadPublicKey(opts.publicKey)
      : (opts.publicKey as KeyObject);
  const rolesClaim = opts.rolesClaim ?? JWT_ROLES_CLAIM_DEFAULT;
  const verifyOptions = {
    algorithms: JWT_ALGORITHMS,
    issuer: opts.issuer,
    audience: opts.audience,
    clockTolerance: opts.clockToleranceSeconds ?? 5,
    requiredClaims: opts.allowNoExp ? [] : ['exp'],
  };
  return async function jwtResolver(req) {
    const token = bearerToken(req);
    if (!token || token.split('.').length !== 3) return null;
    let payload: JWTPayload;
    try {
      // Two calls because jose's overloads take a key or a key getter, not their union.
      payload = (
        typeof key === 'function'
          ? await jwtVerify(token, key, verifyOptions)
          : await jwtVerify(token, key, verifyOptions)
      ).payload;
    } catch (err) {
      // The key server being slow or down is not the client's fault.
      if (err instanceof JwksUnavailableError)
        throw new ApiError('unavailable', err.message, { 'Retry-After': String(Math.max(1, err.retryAfterSeconds)) });
      throw new AuthError(reasonOf(err));
    }
    if (payload.sub === undefined) throw new AuthError('token has no "sub" claim');
    if (typeof payload.sub !== 'string') throw new AuthError('"sub" claim must be a string');
    if (payload.sub === '') throw new AuthError('"sub" claim is empty');
    return { identity: `jwt:${payload.sub}`, roles: rolesFrom(payload, rolesClaim) };
  };
}
