import { createHash } from 'node:crypto';
import type { Request } from 'express';
import type { Cluster, Redis } from 'ioredis';
import { ApiError } from '../error-map.js';
import { capNonceKey } from '../../../shared/redis/keyspace.js';
import { parseStoragePath, type Segment } from '../../../shared/paths.js';
import { withTimeout } from '../../../shared/timeout.js';
import { AuthError, type AuthResult, type RoleResolver } from '../auth.js';

// The Starfish packages declare no licence in their package.json: only this module uses them,
// and only through the dynamic import below, run when cap auth is on. The type import is erased.
type Protocol = typeof import('@drakkar.software/starfish-protocol');
type CapCert = import('@drakkar.software/starfish-protocol').CapCert;
type RevocationList = import('@drakkar.software/starfish-protocol').RevocationList;

/**
 * Allowed distance between a signed request's `X-Starfish-Ts` and this server's clock (the
 * protocol's default, 5 min). A nonce must be remembered while a request carrying it can still
 * pass that check: up to 2 × this after it is first seen (its ts may be up to this far ahead).
 */
export const CAP_MAX_SKEW_MS = 300_000;
/** The reference's bound on the `Authorization: Cap …` header, checked before decoding it. */
export const CAP_MAX_HEADER_BYTES = 8 * 1024;
/**
 * Verified certs remembered per process (about 100 bytes each): a device signs each request, but
 * presents the same cert for weeks, and its Ed25519 check (the protocol's, pure JavaScript) is
 * half the cost of a request's verification.
 */
const CERT_CACHE_ENTRIES = 10_000;
/** A nonce-store call that has not answered by then fails the request with 503 (never a hang). */
const NONCE_TIMEOUT_MS = 2000;

/** Single-use request nonces, shared by every API instance that must refuse a replay. */
export interface NonceStore {
  /** True the first time `(signer, nonce)` is claimed within `ttlMs`; false for a replay. */
  claim(signer: string, nonce: string, ttlMs: number): Promise<boolean>;
}

/** The 16-byte digest naming one (signer, nonce) pair: the key stays short whatever the header held. */
function nonceDigest(signer: string, nonce: string): string {
  return createHash('sha256').update(signer).update('|').update(nonce).digest().subarray(0, 16).toString('base64url');
}

/**
 * Nonces in Redis: one string key per signed request, `<prefix>:<22-char digest of signer and
 * nonce>`, set with `SET NX PX` (one single-key command, so it works on a Redis Cluster, where
 * the keys spread over the masters). Each key expires 2 × the skew window after it is set
 * (docs/reliability.md, "Sizing Redis": ~90 bytes per key).
 */
export class RedisNonceStore implements NonceStore {
  constructor(
    private readonly redis: Redis | Cluster,
    /** E.g. `ingest-cap:<QUEUE_NAME>:n` (shared/redis/keyspace.ts, capNonceKeyPrefix), beside the rate limiter's `ingest-rl:<QUEUE_NAME>`. */
    readonly keyPrefix: string,
  ) {}

  key(signer: string, nonce: string): string {
    return capNonceKey(this.keyPrefix, nonceDigest(signer, nonce));
  }

  async claim(signer: string, nonce: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.set(this.key(signer, nonce), '1', 'PX', ttlMs, 'NX')) === 'OK';
  }
}

/**
 * Nonces in this process only (the library without Redis, tests): replays are refused per
 * process. At most `maxEntries` live nonces; past that a new one is refused (fail closed: a
 * live nonce is never dropped, which would let its request be replayed).
 */
export class MemoryNonceStore implements NonceStore {
  private readonly seen = new Map<string, number>();
  constructor(private readonly maxEntries = 100_000) {}

  async claim(signer: string, nonce: string, ttlMs: number): Promise<boolean> {
    const now = Date.now();
    // Same TTL for every entry, so insertion order is expiry order: sweep from the oldest.
    for (const [k, exp] of this.seen) {
      if (exp > now) break;
      this.seen.delete(k);
    }
    const key = nonceDigest(signer, nonce);
    if (this.seen.has(key) || this.seen.size >= this.maxEntries) return false;
    this.seen.set(key, now + ttlMs);
    return true;
  }
}

/** What a verified cap tells the route: its identity, how it was refused, or the roles it has. */
export interface CapAuthObserver {
  /** One verification (from header parse to nonce claim), whatever its outcome. */
  verifySeconds?(seconds: number): void;
  /** A cap accepted (`ok`) or refused, by a fixed reason code (never an identity or a cert). */
  outcome?(outcome: CapOutcome): void;
  /** The protocol package or the revocation lists could not be loaded: every cap request will fail (500). Called once. */
  loadFailed?(err: unknown): void;
}

export const CAP_OUTCOMES = [
  'ok',
  'too_large',
  'malformed',
  'bad_headers',
  'skew',
  'invalid_cap',
  'expired',
  'kind',
  'method',
  'bad_signature',
  'revoked',
  'replay',
  'store_unavailable',
] as const;
export type CapOutcome = (typeof CAP_OUTCOMES)[number];

export interface CapAuthOptions {
  /** Where nonces are remembered: a Redis client (every instance refuses a replay) or a NonceStore. */
  nonceStore: NonceStore;
  /**
   * Roles for listed identities (user id → roles): `CAP_ADMINS` gives `admin`, TOKENS_FILE's
   * `{ capUserId, roles }` entries give theirs. Granted only to a cap whose scope covers the
   * request (its op on its collection, and its `scope.paths`); on other routes (admin) only to a
   * full-scope cap (`collections: ["*"]`, ops read, list and write).
   */
  identityRoles?: ReadonlyMap<string, readonly string[]>;
  /** The collections served (name + storagePath): maps a route to the collection a scope must name. */
  collections?: readonly { name: string; storagePath: string }[];
  /** Default {@link CAP_MAX_SKEW_MS}. */
  maxSkewMs?: number;
  /** Default {@link CAP_MAX_HEADER_BYTES}. */
  maxCapHeaderBytes?: number;
  /** Signed revocation lists (the protocol's `buildRevocationList`); each is checked against its issuer key when loaded. */
  revocations?: readonly unknown[];
  observer?: CapAuthObserver;
}

/** True when the request presents a Starfish cap (`Authorization: Cap …`). */
export function isCapRequest(req: Request): boolean {
  const h = req.headers.authorization;
  return typeof h === 'string' && /^Cap[ \t]/.test(h.trimStart());
}

/**
 * Chains resolvers by scheme: a `Cap` credential goes to the cap resolver only (its refusal is
 * the answer), anything else (Bearer tokens, JWTs) to `others`.
 */
export function capOrElse(cap: RoleResolver, others: RoleResolver): RoleResolver {
  return async function capOrElseResolver(req) {
    return isCapRequest(req) ? cap(req) : others(req);
  };
}

const OPS = { pull: 'read', list: 'list', push: 'write' } as const;
type Op = (typeof OPS)[keyof typeof OPS];

interface RouteShape {
  name: string;
  /** Segments of the pull/push route and of the list route. */
  full: readonly Segment[];
  prefix: readonly Segment[];
}

/** The collection and op a sync path (`/pull/events/app/id`, relative to the router) addresses, or null. */
function routeOf(
  path: string,
  shapes: readonly RouteShape[],
): { op: Op; collection: string; storagePath: string } | null {
  const parts = path.split('/').filter((s) => s !== '');
  const action = parts[0];
  if (action !== 'pull' && action !== 'list' && action !== 'push') return null;
  const rest = parts.slice(1);
  for (const s of shapes) {
    const segs = action === 'list' ? s.prefix : s.full;
    if (segs.length !== rest.length) continue;
    if (segs.every((seg, i) => seg.kind === 'param' || seg.value === rest[i])) {
      return { op: OPS[action], collection: s.name, storagePath: rest.map(decodeSegment).join('/') };
    }
  }
  return null;
}

function decodeSegment(seg: string): string {
  try {
    return decodeURIComponent(seg);
  } catch {
    return seg;
  }
}

/** `scope.paths` as the reference reads them: `!` entries deny the path and what is under it; no entries allow all. */
function pathInScope(
  p: Protocol,
  storagePath: string,
  paths: readonly string[] | undefined,
  identity: string,
): boolean {
  if (!paths || paths.length === 0) return true;
  const expanded = paths.map((x) => x.split('{identity}').join(identity));
  const allows = expanded.filter((x) => !x.startsWith('!'));
  const denies = expanded.filter((x) => x.startsWith('!')).map((x) => x.slice(1));
  if (!allows.some((g) => p.pathGlobMatch(g, storagePath))) return false;
  return !denies.some((g) => p.pathGlobMatch(g, storagePath) || p.pathGlobMatch(`${g}/**`, storagePath));
}

/**
 * Roles a verified cap gives, as the reference synthesizes them: `cap:<op>:<collection>` for each
 * op and collection of its scope. A `*` collection (a root identity's cap) gives the literal
 * `cap:<op>:*` as the reference does, and also `cap:<op>:<name>` for every served collection:
 * a root cap is its identity's whole authority, and any key holder could sign a cap naming the
 * collection anyway, so `*` widens nothing (docs: README, "Starfish clients").
 */
export function scopeRoles(cert: Pick<CapCert, 'scope'>, collectionNames: readonly string[]): string[] {
  const roles = new Set<string>();
  for (const op of cert.scope.ops) {
    for (const c of cert.scope.collections) {
      roles.add(`cap:${op}:${c}`);
      if (c === '*') for (const name of collectionNames) roles.add(`cap:${op}:${name}`);
    }
  }
  return [...roles];
}

function fullScope(cert: Pick<CapCert, 'scope'>): boolean {
  const ops = new Set<string>(cert.scope.ops);
  return (
    cert.scope.collections.includes('*') &&
    ops.has('read') &&
    ops.has('list') &&
    ops.has('write') &&
    (cert.scope.paths ?? ['**']).includes('**')
  );
}

class CapRefused extends AuthError {
  constructor(
    readonly outcome: CapOutcome,
    message: string,
  ) {
    super(message);
  }
}

/** The revocation lists whose signature verifies against their issuer, indexed for O(1) lookups. */
function loadRevocations(
  p: Protocol,
  lists: readonly unknown[],
): { isRevoked(iss: string, sub: string, capNonce: string): boolean } {
  const pairs = new Set<string>();
  const subjects = new Set<string>();
  lists.forEach((raw, i) => {
    const list = raw as RevocationList;
    const ok = (() => {
      try {
        const msg = new TextEncoder().encode(p.revocationListCanonicalSigningInput(list));
        return p.ed25519Suite.verify(p.getBase64().decode(list.sig), msg, list.iss);
      } catch {
        return false;
      }
    })();
    if (!ok) throw new Error(`revocation list ${i}: its signature does not verify against its issuer (iss)`);
    for (const e of list.revoked) pairs.add(`${list.iss}|${e.sub}|${e.nonce}`);
    for (const s of list.revokedSubjects ?? []) subjects.add(`${list.iss}|${s.sub}`);
  });
  return { isRevoked: (iss, sub, capNonce) => subjects.has(`${iss}|${sub}`) || pairs.has(`${iss}|${sub}|${capNonce}`) };
}

/**
 * The Starfish v3 cap-cert role resolver: `Authorization: Cap <base64 cert>` with
 * `X-Starfish-Sig/Ts/Nonce`. Checks, cheapest first: header size, shape, clock skew, the cert
 * (`verifyCapCert`: well-formed, nbf/exp, issuer signature), its kind (device caps, as the
 * reference's default plugin), the request signature over method, host, path+query and body
 * (`verifyRequestSignature`), revocation, then claims the nonce. Any failure throws an
 * {@link AuthError} naming it (401); the nonce store unreachable is a 503.
 *
 * Identity: `cap:<issUserId>` (a device cap acts for its issuer; never the cert). Only GET
 * requests are verified: a signed write's body would have to be read before the route's own
 * body limits run, so cap-signed pushes are refused (a public push route ignores the header).
 */
export function createCapRoleResolver(opts: CapAuthOptions): RoleResolver {
  const maxSkewMs = opts.maxSkewMs ?? CAP_MAX_SKEW_MS;
  const maxHeader = opts.maxCapHeaderBytes ?? CAP_MAX_HEADER_BYTES;
  const scope = capScope(opts);
  // Loaded once, when the resolver is made (only with cap auth on); a failure to load it or a
  // revocation list that does not verify fails each cap request (500, logged), not the process.
  let loaded: Promise<Loaded> | undefined;
  const load = (): Promise<Loaded> =>
    (loaded ??= import('@drakkar.software/starfish-protocol').then((p) => ({
      p,
      revoked: loadRevocations(p, opts.revocations ?? []),
    })));
  const certs = new VerifiedCerts();
  load().catch((err: unknown) => opts.observer?.loadFailed?.(err));

  async function verify(req: Request): Promise<AuthResult> {
    // Before any signature work: a public push that carries a cap costs no Ed25519 verification.
    if (req.method !== 'GET')
      throw new CapRefused(
        'method',
        `cap-signed ${req.method} requests are not supported (GET only); push with a Bearer token or without credentials`,
      );
    const { p, revoked } = await load();
    const header = req.headers.authorization ?? '';
    const cert = parseCapHeader(header, maxHeader);
    const { sig, ts, nonce } = signatureHeaders(req);
    const now = Date.now();
    if (!p.isWithinClockSkew(ts, now, maxSkewMs))
      throw new CapRefused(
        'skew',
        `request timestamp outside the allowed clock skew (±${Math.round(maxSkewMs / 1000)} s)`,
      );
    await certs.verify(p, header, cert, now, maxSkewMs);
    if (cert.kind !== 'device' || typeof cert.sub !== 'string')
      throw new CapRefused('kind', 'cap-cert kind is not accepted (device caps only)');
    const signed = await p.verifyRequestSignature(
      { method: 'GET', pathAndQuery: req.url, body: undefined, host: req.headers.host ?? '' },
      { sig, ts, nonce },
      cert.sub,
    );
    if (!signed)
      throw new CapRefused(
        'bad_signature',
        'bad request signature: it does not sign this request (method, host, path and query, body)',
      );
    if (revoked.isRevoked(cert.iss, cert.sub, cert.nonce)) throw new CapRefused('revoked', 'cap-cert revoked');
    await claimNonce(opts, cert.sub, nonce, maxSkewMs);
    return { identity: `cap:${cert.issUserId}`, roles: capRoles(p, cert, req.path, scope) };
  }

  return observedResolver(verify, opts.observer);
}

type Loaded = { p: Protocol; revoked: ReturnType<typeof loadRevocations> };

/** What the roles of a cap depend on besides the cap: the served routes and the roles listed per identity. */
interface CapScope {
  shapes: RouteShape[];
  names: string[];
  identityRoles: ReadonlyMap<string, readonly string[]>;
}

function capScope(opts: Pick<CapAuthOptions, 'collections' | 'identityRoles'>): CapScope {
  const shapes: RouteShape[] = (opts.collections ?? []).map((c) => {
    const t = parseStoragePath(c.storagePath);
    return { name: c.name, full: t.segments, prefix: t.segments.slice(0, -1) };
  });
  return {
    shapes,
    names: shapes.map((s) => s.name),
    identityRoles: opts.identityRoles ?? new Map<string, readonly string[]>(),
  };
}

/** The cert of the `Authorization: Cap …` header, or a refusal (too large, malformed). */
function parseCapHeader(header: string, maxHeader: number): CapCert {
  if (Buffer.byteLength(header) > maxHeader)
    throw new CapRefused('too_large', `Cap header is ${Buffer.byteLength(header)} bytes; at most ${maxHeader}`);
  const cert = parseCap(header);
  if (!cert)
    throw new CapRefused(
      'malformed',
      'malformed cap-cert in the Authorization header (base64 of a JSON object expected)',
    );
  return cert;
}

/** `X-Starfish-Sig/Ts/Nonce`, or a refusal when one is missing or the timestamp is not integer milliseconds. */
function signatureHeaders(req: Request): { sig: string; ts: number; nonce: string } {
  const sig = req.headers['x-starfish-sig'];
  const tsHeader = req.headers['x-starfish-ts'];
  const nonce = req.headers['x-starfish-nonce'];
  if (typeof sig !== 'string' || typeof tsHeader !== 'string' || typeof nonce !== 'string' || !sig || !nonce) {
    throw new CapRefused(
      'bad_headers',
      'missing request signature headers (X-Starfish-Sig, X-Starfish-Ts, X-Starfish-Nonce)',
    );
  }
  if (!/^-?\d{1,16}$/.test(tsHeader))
    throw new CapRefused('bad_headers', 'invalid X-Starfish-Ts (integer milliseconds expected)');
  return { sig, ts: Number(tsHeader), nonce };
}

/**
 * Certs whose signature verified, by a digest of their header → until when (ms) they stay valid:
 * the same bytes verify the same way, so a cert is verified once until its expiry (+ skew).
 * Bounded: at most CERT_CACHE_ENTRIES (one per device signing in); the oldest goes first.
 */
class VerifiedCerts {
  private readonly until = new Map<string, number>();

  /** Verifies `cert` (`verifyCapCert`) unless the same header verified before and has not expired; a refusal otherwise. */
  async verify(p: Protocol, header: string, cert: CapCert, now: number, maxSkewMs: number): Promise<void> {
    const key = createHash('sha256').update(header).digest('base64');
    const goodUntil = this.until.get(key);
    if (goodUntil !== undefined && now <= goodUntil) return;
    const skewSec = Math.round(maxSkewMs / 1000);
    const certOk = await p.verifyCapCert(cert, { now: Math.floor(now / 1000), clockSkewSec: skewSec });
    if (!certOk.ok)
      throw new CapRefused(
        certOk.reason === 'expired' ? 'expired' : 'invalid_cap',
        `cap-cert ${certOk.reason ?? 'invalid'}`,
      );
    this.remember(key, (cert.exp + skewSec) * 1000);
  }

  private remember(key: string, until: number): void {
    if (this.until.size >= CERT_CACHE_ENTRIES) {
      const oldest = this.until.keys().next();
      if (!oldest.done) this.until.delete(oldest.value);
    }
    this.until.set(key, until);
  }
}

/** Claims the request's nonce for `sub`: a replay is refused (401), an unreachable store is a 503. */
async function claimNonce(
  opts: Pick<CapAuthOptions, 'nonceStore' | 'observer'>,
  sub: string,
  nonce: string,
  maxSkewMs: number,
): Promise<void> {
  let fresh: boolean;
  try {
    fresh = await withTimeout(opts.nonceStore.claim(sub, nonce, 2 * maxSkewMs), NONCE_TIMEOUT_MS, 'nonce store');
  } catch {
    opts.observer?.outcome?.('store_unavailable');
    throw new ApiError('unavailable', 'cannot check the request nonce (Redis unavailable); retry later', {
      'Retry-After': '1',
    });
  }
  if (!fresh) throw new CapRefused('replay', 'nonce replay: this signed request was already used');
}

/** The roles a verified cap gives on `path`: none outside its paths; its identity's listed roles only where its scope covers the route. */
function capRoles(p: Protocol, cert: CapCert, path: string, scope: CapScope): string[] {
  const route = routeOf(path, scope.shapes);
  if (route && !pathInScope(p, route.storagePath, cert.scope.paths, cert.issUserId)) return [];
  const roles = scopeRoles(cert, scope.names);
  const listed = scope.identityRoles.get(cert.issUserId);
  if (listed) {
    const covers = route
      ? (cert.scope.ops as string[]).includes(route.op) &&
        (cert.scope.collections.includes('*') || cert.scope.collections.includes(route.collection))
      : fullScope(cert);
    if (covers) roles.push(...listed);
  }
  return roles;
}

/** `verify` as a RoleResolver that reports each outcome and the time it took. */
function observedResolver(
  verify: (req: Request) => Promise<AuthResult>,
  observer: CapAuthOptions['observer'],
): RoleResolver {
  return async function capResolver(req) {
    const t0 = performance.now();
    try {
      const who = await verify(req);
      observer?.outcome?.('ok');
      return who;
    } catch (err) {
      if (err instanceof CapRefused) observer?.outcome?.(err.outcome);
      throw err;
    } finally {
      observer?.verifySeconds?.((performance.now() - t0) / 1000);
    }
  };
}

/** The cert of `Cap <base64(JSON)>`, or null when it is not one. Shape is left to `verifyCapCert`. */
function parseCap(header: string): CapCert | null {
  const m = /^\s*Cap[ \t]+([A-Za-z0-9+/=_-]+)\s*$/.exec(header);
  if (!m?.[1]) return null;
  try {
    const v = JSON.parse(Buffer.from(m[1], 'base64').toString('utf8')) as unknown;
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return null;
    const c = v as Partial<CapCert>;
    if (
      typeof c.scope !== 'object' ||
      c.scope === null ||
      !Array.isArray(c.scope.ops) ||
      !Array.isArray(c.scope.collections)
    )
      return null;
    return v as CapCert;
  } catch {
    return null;
  }
}
