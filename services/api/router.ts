import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import express, { type ErrorRequestHandler, type NextFunction, type Request, type RequestHandler, type Response, type Router } from 'express';
import { type CollectionConfig, RATE_LIMIT_PUSH_ON_ERROR_DEFAULT, type SyncConfig, type SyncConfigInput, TRUSTED_PROXY_HOPS_DEFAULT, parseSyncConfig } from '../../shared/config.js';
import { type EnvelopeCheck, checkEnvelope } from '../../shared/envelope.js';
import { type PreparedBatch, prepareBatch } from '../../shared/parquet/encode.js';
import { HttpError, StoreError } from '../../shared/errors.js';
import { parseIntegerParam } from '../../shared/http.js';
import { parseBatchRef } from '../../shared/ids.js';
import { capNonceKeyPrefix, rateLimitKeyPrefix } from '../../shared/redis/keyspace.js';
import { type StoragePathTemplate, batchKey, checkParamValue, listPrefix, routePattern } from '../../shared/paths.js';
import { RAW_DELETED_HEADER, checkListCursor } from '../../shared/rollup/retention.js';
import type { ByteRange, ObjectStore } from '../../shared/store/types.js';
import type { Cluster, Redis } from 'ioredis';
import { type RoleResolver, TokenRoles, authenticate, authorize, tokenRoleResolver } from './auth.js';
import { type AuditLogger, audit } from './edge/audit.js';
import { type CapAuthOptions, MemoryNonceStore, type NonceStore, RedisNonceStore, capOrElse, createCapRoleResolver } from './edge/cap-auth.js';
import { type ConfigEndpointOptions, configHandler } from './config-route.js';
import { type CounterStore, MemoryCounterStore, RedisCounterStore } from './edge/counters.js';
import { type CorsOptions, cors } from './edge/cors.js';
import { type BucketMode, type RateAction, RateLimiter, resolveCounters } from './edge/rate-limit.js';
import { type SecurityHeadersOptions, securityHeaders } from './edge/security-headers.js';
import { requestTimeout } from './edge/timeout.js';
import { noImplicitConditional } from './edge/conditional.js';
import { methodNotAllowed } from './edge/methods.js';
import { BodyError, type ContentCoding, type RequestBody, contentTypeAllowed, discardRest, parseContentEncoding, readBody } from './body.js';
import type { RejectReason, ShedReason } from './metrics.js';
import { API_ENCODED_ROW_BYTES, API_QUEUED_ROW_BYTES, type ByteBudget, batchCost } from '../../shared/byte-budget.js';
import { contentRange, decideRange, ifRangeAllows, unsatisfiedRange } from './range.js';
import { type EventsServerPlugin, PARQUET_MIME_TYPE, type PushResult, pushResultOf } from './plugin.js';
import { envelopeRejectReason, pushResponse } from './push/http.js';
import type { PushOutcome } from './push/outcome.js';
import { REWRITTEN_ROUTE, rewrittenHandler, rewrittenRoles } from './list/rewritten.js';

/** A push body's check: {@link checkEnvelope}'s, or (for a body the plugin encodes) the scan that prepared it. */
type BodyCheck = EnvelopeCheck | { ok: true; text?: string; events: number; everyEventHasMessageId: boolean; prepared?: PreparedBatch };

/** {@link prepareBatch} as a check: the same errors, in the same words, as checkEnvelope's. */
function prepared(bytes: Uint8Array): BodyCheck {
  const r = prepareBatch(bytes);
  return r.ok ? { ok: true, events: r.batch.rows, everyEventHasMessageId: r.everyEventHasMessageId, prepared: r.batch } : { ok: false, error: r.reason, code: r.code };
}

/** Hooks the service wires to its metrics; the router itself holds no metric objects. */
export interface RouterObserver {
  rejected?(reason: RejectReason): void;
  pushed?(result: PushResult, bodyBytes: number): void;
  /** A push answered 503 + Retry-After before its body was used: `high_water` (queue or Redis memory), `inflight_bytes` (body budget). */
  shed?(reason: ShedReason): void;
  /** The batch could not be made durable (Redis or the store unreachable): answered 503. */
  unavailable?(): void;
  /** A request refused with 429, by action and rule (never an app or identity). */
  rateLimited?(action: RateAction, rule: BucketMode | 'app_events'): void;
  /** The rate limiter could not reach its store; `open`: the request went through. */
  rateLimitStoreFailed?(action: RateAction, outcome: 'open' | 'closed'): void;
  rateLimitCheckSeconds?(seconds: number): void;
  /** A request answered 408 (REQUEST_TIMEOUT_MS). */
  timedOut?(): void;
  /** Any sync route refused by auth. */
  authDenied?(status: 401 | 403): void;
}

export interface SyncRouterOptions {
  store: ObjectStore;
  config: SyncConfigInput;
  plugins: readonly EventsServerPlugin[];
  /** Bearer token → roles; a plain map or a TokenRoles (the default resolver's table). */
  auth?: TokenRoles | ReadonlyMap<string, readonly string[]>;
  /** The auth hook: request → `{ identity, roles }`. Default: the bearer-token table of `auth`. */
  roleResolver?: RoleResolver;
  /**
   * Starfish v3 cap-cert auth (`Authorization: Cap …`), chained before `roleResolver`: a Cap
   * credential goes to it, a Bearer one to the others. `nonceStore`: a Redis client (replays
   * refused across instances, keys `<nonceKeyPrefix>:…`) or a NonceStore; default this process only.
   * The Starfish protocol package is loaded (edge/cap-auth.ts) only with this option. Default off.
   */
  capAuth?: Omit<CapAuthOptions, 'nonceStore' | 'collections'> & { nonceStore?: NonceStore | Redis | Cluster; nonceKeyPrefix?: string };
  /** `GET /config`, the Starfish collection manifest (`fetchServerConfig`). Default off, as in the reference; `npm start` serves it public. */
  configEndpoint?: ConfigEndpointOptions;
  /** CORS for browser SDKs: `true` (any origin) or options. Default off. */
  cors?: boolean | CorsOptions;
  /** `X-Content-Type-Options: nosniff`, `Cache-Control: no-store` on errors and list, no `X-Powered-By`. Default on. */
  securityHeaders?: boolean | SecurityHeadersOptions;
  /** A request not answered within this many ms gets 408 JSON. Default off (0). */
  requestTimeoutMs?: number;
  /** One entry per list, pull (and push with `auditPush`). Default: none. */
  auditLogger?: AuditLogger;
  auditPush?: boolean;
  /** Where rate-limit counters live: a Redis client (shared by every instance) or a CounterStore. Default: this process only. */
  rateLimitStore?: Redis | Cluster | CounterStore;
  /** Prefix of the rate-limit keys in Redis. Default `ingest-rl`. */
  rateLimitKeyPrefix?: string;
  /** Proxies in front of this server; X-Forwarded-For is believed that many hops (0: never). Default 0. */
  trustedProxyHops?: number;
  /** Counter store unreachable: push goes through (`open`, default) or gets 503 (`closed`). Reads always go through. */
  rateLimitPushOnError?: 'open' | 'closed';
  observer?: RouterObserver;
  /** Push only: every list-prefix parameter must match this (anchored) pattern, else 400 (`APP_PATTERN`). */
  appPattern?: RegExp;
  /** Load shedding: a reason to refuse pushes right now (503 + Retry-After), or null. */
  shedReason?: () => string | null;
  /**
   * Memory of pushes this process may hold at once (MAX_INFLIGHT_BYTES): each body's bytes as
   * they are read, then, once its events are counted, their rows' cost (shared/byte-budget.ts). A
   * push that would pass it gets 503 + Retry-After, before its body is read when it declares a
   * Content-Length. Without it, only maxBodyBytes and maxEventsPerBatch bound each push.
   */
  inflightBudget?: ByteBudget;
  /** Where the error mapping logs store failures and unexpected errors (a pino logger fits). */
  log?: ErrorLog;
}

/** The two log levels the error mapping uses. */
export interface ErrorLog {
  warn(fields: Record<string, unknown>, msg: string): void;
  error(fields: Record<string, unknown>, msg: string): void;
}

/**
 * The router's JSON error mapping, exported so a host app can put it after its own routes too:
 * `HttpError` → its status, headers and `{error}`; a retriable `StoreError` → 503 + `Retry-After`,
 * another → 500; a 4xx from Express' own middleware keeps its status; anything else → 500
 * `{"error":"internal error"}`. Never an HTML page, never an error's internals.
 */
export function jsonErrorHandler(log?: ErrorLog): ErrorRequestHandler {
  return function jsonErrors(err: unknown, _req: Request, res: Response, next: NextFunction): void {
    if (res.headersSent) {
      // Too late for a JSON answer (a pull stream failed midway): let Express close the connection.
      next(err);
      return;
    }
    if (err instanceof HttpError) {
      res.set(err.headers).status(err.status).json({ error: err.message });
      return;
    }
    if (err instanceof StoreError) {
      log?.warn({ err: err.message, retriable: err.retriable }, 'store error');
      res.status(err.retriable ? 503 : 500).set(err.retriable ? { 'Retry-After': '1' } : {}).json({ error: err.retriable ? 'store unavailable; retry later' : 'store error' });
      return;
    }
    const status = (err as { status?: unknown }).status;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      res.status(status).json({ error: (err as Error).message || 'bad request' });
      return;
    }
    log?.error({ err: err instanceof Error ? err.message : String(err) }, 'unhandled error');
    res.status(500).json({ error: 'internal error' });
  };
}

/** What pull needs of one stored object: its metadata and a way to read all or part of it. */
interface PullObject {
  size: number;
  sha256: string;
  read(range?: ByteRange): Promise<Readable>;
}

/**
 * Metadata from `head` and bytes from `getStream`, so HEAD, 304 and Range read no more than they
 * answer with. A custom store without them is read whole once (and hashed) instead.
 */
async function openObject(store: ObjectStore, key: string): Promise<PullObject | null> {
  if (store.head && store.getStream) {
    const meta = await store.head(key);
    if (!meta) return null;
    const getStream = store.getStream.bind(store);
    return {
      size: meta.size,
      sha256: meta.sha256,
      async read(range) {
        const stream = await getStream(key, range);
        // Deleted between head and read: the answer has begun (headers set), so fail it as a store error.
        if (!stream) throw new StoreError(`object ${JSON.stringify(key)} vanished while being read`, { retriable: true });
        return stream;
      },
    };
  }
  const obj = await store.getBytes(key);
  if (!obj) return null;
  const body = Buffer.from(obj.body.buffer, obj.body.byteOffset, obj.body.byteLength);
  return {
    size: body.byteLength,
    sha256: createHash('sha256').update(body).digest('hex'),
    read: async (range) => Readable.from([range ? body.subarray(range.start, range.end + 1) : body]),
  };
}

const IDEMPOTENCY_KEY_RE = /^[\x21-\x7e]{1,255}$/;

function reject(observer: RouterObserver | undefined, reason: RejectReason, status: number, message: string, headers?: Record<string, string>): HttpError {
  observer?.rejected?.(reason);
  return new HttpError(status, message, headers);
}

/** Checks every route param; a bad one is a 400 naming it. */
function paramsOf(req: Request, names: readonly string[], observer?: RouterObserver): Record<string, string> {
  const out: Record<string, string> = {};
  const raw = req.params as Record<string, string | undefined>;
  for (const name of names) {
    const value = raw[name] ?? '';
    const problem = checkParamValue(value);
    if (problem) throw reject(observer, 'bad_param', 400, `path parameter "${name}" ${problem}`);
    out[name] = value;
  }
  return out;
}

function parseLimit(raw: unknown): number {
  return parseIntegerParam(raw, { name: 'limit', min: 1, max: 1000, fallback: 100 });
}

function parseAfter(raw: unknown): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string') throw new HttpError(400, 'after must be a single batch id');
  const bare = parseBatchRef(raw);
  if (bare === null) throw new HttpError(400, 'after must be a batch id like 1782933157690-0000-735223 (with or without .parquet)');
  return bare;
}

/** Every `{param}` of a storagePath, the batch id's included. */
function paramNamesOf(t: StoragePathTemplate): string[] {
  return t.segments.flatMap((s) => (s.kind === 'param' ? [s.name] : []));
}

/** What the push route of one collection is built from. */
interface PushRoute {
  opts: SyncRouterOptions;
  plugin: EventsServerPlugin;
  collection: CollectionConfig;
  limiter: RateLimiter | null;
}

/** The checks made before the body is read (load, params, headers): the params and what the headers ask for. */
async function pushPreamble({ opts, plugin, collection }: PushRoute, req: Request, paramNames: readonly string[]): Promise<{ params: Record<string, string>; coding: ContentCoding; idemHeader: string | undefined }> {
  const { observer } = opts;
  const t = plugin.template;
  const shed = opts.shedReason?.();
  if (shed) {
    observer?.shed?.('high_water');
    throw new HttpError(503, `overloaded: ${shed}; retry later`, { ...(await discardRest(req)), 'Retry-After': '2' });
  }
  const params = paramsOf(req, paramNames, observer);
  if (opts.appPattern) {
    const bad = t.prefixParams.find((n) => !opts.appPattern?.test(params[n] ?? ''));
    if (bad !== undefined) throw reject(observer, 'bad_param', 400, `path parameter "${bad}" does not match APP_PATTERN (${opts.appPattern.source})`);
  }
  if (!contentTypeAllowed(req.headers['content-type'], collection.allowedMimeTypes)) {
    throw reject(observer, 'content_type', 415, `Content-Type must be ${collection.allowedMimeTypes.join(' or ')} (UTF-8)`);
  }
  const coding = parseContentEncoding(req.headers['content-encoding']);
  if (!coding.ok) throw reject(observer, 'content_encoding', 415, coding.error);
  const idemHeader = req.headers['idempotency-key'];
  if (idemHeader !== undefined && (typeof idemHeader !== 'string' || !IDEMPOTENCY_KEY_RE.test(idemHeader))) {
    throw reject(observer, 'bad_header', 400, 'Idempotency-Key must be 1-255 printable ASCII characters');
  }
  return { params, coding: coding.coding, idemHeader };
}

/** The request body, read within the collection's limit and the in-flight budget (`held` grows with it). */
async function readPushBody({ opts, collection }: PushRoute, req: Request, coding: ContentCoding, held: { bytes: number }): Promise<RequestBody> {
  const { observer } = opts;
  try {
    return await readBody(req, { maxBytes: collection.maxBodyBytes, coding, budget: opts.inflightBudget, held });
  } catch (err) {
    if (err instanceof BodyError) {
      if (err.reason === 'too_large') observer?.rejected?.('too_large');
      else if (err.reason === 'bad_encoding') observer?.rejected?.('bad_encoding');
      else if (err.reason === 'over_budget') observer?.shed?.('inflight_bytes');
    }
    throw err;
  }
}

/**
 * The body's check, and its rows charged to the in-flight budget. The queue packs the bytes; only
 * an inline encoder needs the body as text, so a queued push never decodes it (that string would
 * double every in-flight body, then be dropped). A body the plugin encodes itself is checked by
 * the scan that also takes its columns. The status of a refused body comes from its code.
 */
function checkPushBody({ opts, plugin, collection }: PushRoute, bytes: Buffer, held: { bytes: number }): Extract<BodyCheck, { ok: true }> {
  const { observer } = opts;
  const check: BodyCheck = plugin.encodesBody(bytes.length) ? prepared(bytes) : checkEnvelope(bytes, { text: plugin.mode === 'inline' });
  if (!check.ok) throw reject(observer, envelopeRejectReason(check.code), 400, check.error);
  if (check.events > collection.maxEventsPerBatch) {
    throw reject(observer, 'too_large', 413, `data.events has ${check.events} events; this collection's maxEventsPerBatch is ${collection.maxEventsPerBatch}`);
  }
  // Rows cost memory of their own, whatever their JSON length (shared/byte-budget.ts): charged once counted.
  if (opts.inflightBudget) {
    const rowsCost = batchCost(check.events, 0, 'prepared' in check && check.prepared ? API_ENCODED_ROW_BYTES : API_QUEUED_ROW_BYTES);
    if (!opts.inflightBudget.tryTake(rowsCost, held.bytes)) {
      observer?.shed?.('inflight_bytes');
      throw new HttpError(503, `overloaded: the ${check.events} events of this push do not fit this process' memory budget for pushes in flight (MAX_INFLIGHT_BYTES); retry later`, { 'Retry-After': '1' });
    }
    held.bytes += rowsCost;
  }
  return check;
}

/** Answers a push's outcome with its status and body (push/http.ts), and tells the observer. */
function answerPush(res: Response, outcome: PushOutcome, observer: RouterObserver | undefined, sentBytes: number): void {
  if (outcome.kind === 'unavailable') observer?.unavailable?.();
  if (outcome.kind === 'conflict') observer?.rejected?.('idempotency_conflict');
  const r = pushResponse(outcome);
  const result = pushResultOf(outcome);
  if ('error' in r.body || !result) throw new HttpError(r.status, 'error' in r.body ? r.body.error : 'internal error', r.headers);
  observer?.pushed?.(result, sentBytes);
  res.status(r.status).json(r.body);
}

/** `POST /push/<storagePath>` of one collection. */
function pushHandler(route: PushRoute): RequestHandler {
  const { opts, plugin, collection, limiter } = route;
  const t = plugin.template;
  const appEvents = collection.rateLimit?.appEvents;
  const paramNames = paramNamesOf(t);
  return async function push(req: Request, res: Response): Promise<void> {
    const { params, coding, idemHeader } = await pushPreamble(route, req, paramNames);
    // Budget taken for this body; given back once the push is answered, whatever the outcome.
    const held = { bytes: 0 };
    try {
      const body = await readPushBody(route, req, coding, held);
      const check = checkPushBody(route, body.bytes, held);
      delete params[t.batchParam];
      // A keyed retry stores nothing new (the first answer, or 422): answered before the app's
      // budget is charged, and charging nothing.
      if (limiter && appEvents && !(idemHeader !== undefined && (await plugin.idempotencyClaimed(params, idemHeader, body.decodedHash)))) {
        await limiter.admitEvents(collection.name, t.prefixParams.map((n) => params[n]).join('/'), appEvents, check.events, res);
      }
      const outcome = await plugin.accept({
        params,
        body: body.bytes,
        events: check.events,
        text: check.text ?? '',
        prepared: 'prepared' in check ? check.prepared : undefined,
        everyEventHasMessageId: check.everyEventHasMessageId,
        idempotencyKey: idemHeader,
        hash: body.hash,
        decodedHash: body.decodedHash,
      });
      answerPush(res, outcome, opts.observer, body.sentBytes);
    } finally {
      opts.inflightBudget?.give(held.bytes);
    }
  };
}

/** `GET /pull/<storagePath>` of one collection: the batch file, with ETag, 304 and ranges. */
function pullHandler(plugin: EventsServerPlugin): RequestHandler {
  const t = plugin.template;
  const allNames = paramNamesOf(t);
  return async function pull(req: Request, res: Response): Promise<void> {
    const params = paramsOf(req, allNames);
    const batchId = parseBatchRef(params[t.batchParam] as string);
    delete params[t.batchParam];
    const obj = batchId === null ? null : await openObject(plugin.store, batchKey(t, params, batchId));
    if (!obj) {
      res.status(200).json({ data: {}, hash: '', timestamp: Date.now() });
      return;
    }
    const etag = `"${obj.sha256}"`;
    res.setHeader('ETag', etag);
    // Not immutable: an erasure rewrites a batch file in place (issue 36), so a cache must ask
    // again each time; the ETag (the file's sha256) still makes that a 304 while it is unchanged.
    res.setHeader('Cache-Control', 'private, no-cache');
    res.setHeader('Accept-Ranges', 'bytes');
    // If-None-Match by weak comparison (RFC 9110 §13.1.2). Not Express' req.fresh: it answers
    // "stale" whenever the request says Cache-Control: no-cache, which fetch() adds by itself
    // to every request carrying If-None-Match, so fetch clients would never get their 304.
    const inm = req.headers['if-none-match'];
    if (inm && inm.split(',').some((v) => v.trim().replace(/^W\//, '') === etag || v.trim() === '*')) {
      res.status(304).end();
      return;
    }
    const { size } = obj;
    // If-None-Match wins over Range (RFC 9110 §13.2.2); If-Range decides whether Range applies at all.
    const range = ifRangeAllows(req.get('if-range'), etag) ? decideRange(req.headers.range, size) : ({ kind: 'full' } as const);
    if (range.kind === 'unsatisfiable') {
      // An error must not be cached for a year like the file itself.
      res.removeHeader('Cache-Control');
      throw new HttpError(416, `range not satisfiable: the batch has ${size} bytes`, { 'Content-Range': unsatisfiedRange(size) });
    }
    res.setHeader('Content-Type', PARQUET_MIME_TYPE);
    const part = range.kind === 'partial' ? { start: range.start, end: range.end } : undefined;
    if (part) res.setHeader('Content-Range', contentRange(part.start, part.end, size));
    res.setHeader('Content-Length', String(part ? part.end - part.start + 1 : size));
    res.status(part ? 206 : 200);
    // Express routes HEAD to this GET handler: same headers, no body, nothing read.
    if (req.method === 'HEAD' || size === 0) {
      res.end();
      return;
    }
    // Streamed: an 8 MB batch never sits whole in memory; a client that goes away stops the read.
    await pipeline(await obj.read(part), res);
  };
}

/** `others`, behind the cap-cert resolver when `opts.capAuth` is set. */
function withCapAuth(opts: SyncRouterOptions, collections: readonly { name: string; storagePath: string }[], others: RoleResolver): RoleResolver {
  const o = opts.capAuth;
  if (!o) return others;
  const given = o.nonceStore;
  const nonceStore = given === undefined ? new MemoryNonceStore() : 'claim' in given ? given : new RedisNonceStore(given, o.nonceKeyPrefix ?? capNonceKeyPrefix());
  return capOrElse(createCapRoleResolver({ ...o, nonceStore, collections }), others);
}

/**
 * The sync router: for every configured collection, `POST /push/<storagePath>`,
 * `GET /pull/<storagePath>` and (when listable) `GET /list/<storagePath minus its last segment>`.
 */
export function createSyncRouter(opts: SyncRouterOptions): Router {
  const config = parseSyncConfig(opts.config);
  const tokens = opts.auth instanceof TokenRoles ? opts.auth : new TokenRoles(opts.auth ?? new Map());
  const resolver = withCapAuth(opts, config.collections, opts.roleResolver ?? tokenRoleResolver(tokens));
  const router = express.Router({ caseSensitive: true, strict: false });
  if (opts.configEndpoint) {
    if (opts.cors) router.use('/config', cors(opts.cors));
    router.get('/config', configHandler(config, opts.configEndpoint, resolver));
    router.all('/config', methodNotAllowed(['GET', 'HEAD']));
  }
  const mount: MountContext = { router, opts, resolver, noStore: useEdgeMiddleware(router, opts), served: [], ...rateLimits(opts, config) };
  for (const collection of config.collections) mountCollection(mount, collection, pluginOf(opts, collection));
  // After every collection's routes, so one collection's path never hides another's method.
  for (const [path, methods] of mount.served) router.all(path, methodNotAllowed(methods));
  // A host app's default error page is HTML: the router answers its own errors as JSON.
  router.use(jsonErrorHandler(opts.log));
  return router;
}

/** What mounting each collection's routes shares. */
interface MountContext {
  router: Router;
  opts: SyncRouterOptions;
  resolver: RoleResolver;
  /** `Cache-Control: no-store` on list answers (with security headers on). */
  noStore: RequestHandler;
  /** Each route path and the methods it serves: any other method gets 405 + Allow. */
  served: [string, string[]][];
  counters: Map<string, ReturnType<typeof resolveCounters>>;
  limiter: RateLimiter | null;
}

const passThrough = (_req: Request, _res: Response, next: NextFunction): void => next();

/**
 * The edge middleware, on the sync routes only (a host app's own routes are left alone):
 * conditional requests, CORS, security headers, the request timeout. Returns the list routes'
 * `no-store` middleware.
 */
function useEdgeMiddleware(router: Router, opts: SyncRouterOptions): RequestHandler {
  const syncPaths = ['/push', '/pull', '/list'];
  // Conditional requests are answered by pull alone, never by Express (edge/conditional.ts).
  router.use(syncPaths, noImplicitConditional);
  if (opts.cors) router.use(syncPaths, cors(opts.cors));
  const secure = opts.securityHeaders ?? true;
  if (secure) router.use(syncPaths, securityHeaders(secure));
  if (opts.requestTimeoutMs && opts.requestTimeoutMs > 0) router.use(syncPaths, requestTimeout(opts.requestTimeoutMs, () => opts.observer?.timedOut?.()));
  return (_req, res, next) => {
    if (secure) res.setHeader('Cache-Control', 'no-store');
    next();
  };
}

/** Each collection's rate-limit counters, and the limiter (null when no collection is limited). */
function rateLimits(opts: SyncRouterOptions, config: SyncConfig): Pick<MountContext, 'counters' | 'limiter'> {
  const { observer } = opts;
  const counters = new Map(config.collections.map((c) => [c.name, resolveCounters(c, config.rateLimit)]));
  const limited = config.collections.some((c) => c.rateLimit?.appEvents) || [...counters.values()].some((a) => a.push.length + a.pull.length + a.list.length > 0);
  if (!limited) return { counters, limiter: null };
  const store = opts.rateLimitStore;
  const limiter = new RateLimiter({
    store: store === undefined ? new MemoryCounterStore() : 'hit' in store ? store : new RedisCounterStore(store),
    keyPrefix: opts.rateLimitKeyPrefix ?? rateLimitKeyPrefix(),
    trustedProxyHops: opts.trustedProxyHops ?? TRUSTED_PROXY_HOPS_DEFAULT,
    pushOnError: opts.rateLimitPushOnError ?? RATE_LIMIT_PUSH_ON_ERROR_DEFAULT,
    observer: { limited: observer?.rateLimited, storeFailed: observer?.rateLimitStoreFailed, checkSeconds: observer?.rateLimitCheckSeconds },
  });
  return { counters, limiter };
}

/** The events plugin of `collection`; throws when there is none or its storagePath differs from the config's. */
function pluginOf(opts: SyncRouterOptions, collection: CollectionConfig): EventsServerPlugin {
  const plugin = opts.plugins.find((p) => p.collection === collection.name);
  if (!plugin) throw new Error(`collection "${collection.name}" has no events plugin; pass createEventsServerPlugin({ collection: "${collection.name}", ... })`);
  if (plugin.template.source !== collection.storagePath) {
    throw new Error(`collection "${collection.name}": plugin storagePath "${plugin.template.source}" differs from the config's "${collection.storagePath}"`);
  }
  return plugin;
}

/** One collection's push, list (when listable), rewritten listing and pull routes. */
function mountCollection(m: MountContext, collection: CollectionConfig, plugin: EventsServerPlugin): void {
  const { router, opts, resolver, noStore, limiter } = m;
  const observer = opts.observer;
  const denied = (status: 401 | 403): void => {
    observer?.authDenied?.(status);
    observer?.rejected?.(status === 401 ? 'unauthorized' : 'forbidden');
  };
  const deniedRead = (status: 401 | 403): void => observer?.authDenied?.(status);
  const auditing = (action: 'push' | 'list' | 'pull'): RequestHandler =>
    opts.auditLogger && (action !== 'push' || opts.auditPush) ? audit(action, collection.name, opts.auditLogger) : passThrough;
  const rules = m.counters.get(collection.name) ?? { push: [], pull: [], list: [] };
  const limit = (action: RateAction): RequestHandler => (limiter && rules[action].length > 0 ? limiter.middleware(collection.name, rules[action]) : passThrough);
  const t = plugin.template;
  const full = routePattern(t.segments);
  const prefixRoute = routePattern(t.segments.slice(0, -1));
  m.served.push([`/push/${full}`, ['POST']], [`/pull/${full}`, ['GET', 'HEAD']]);
  if (collection.listable) m.served.push([`/list/${prefixRoute}`, ['GET', 'HEAD']]);

  router.post(`/push/${full}`, auditing('push'), authenticate(collection.writeRoles, resolver), limit('push'), authorize(denied), pushHandler({ opts, plugin, collection, limiter }));
  if (collection.listable) {
    router.get(`/list/${prefixRoute}`, auditing('list'), noStore, authenticate(collection.readRoles, resolver), limit('list'), authorize(deniedRead), listHandler(plugin));
  }
  // The rewritten listing (issue 36) names one app: only for a storagePath with one list parameter.
  const appParam = collection.listable && t.prefixParams.length === 1 ? t.prefixParams[0] : undefined;
  if (appParam !== undefined) {
    const path = `/list/${prefixRoute}/${REWRITTEN_ROUTE}`;
    m.served.push([path, ['GET', 'HEAD']]);
    router.get(path, auditing('list'), noStore, authenticate(rewrittenRoles(collection.readRoles), resolver), limit('list'), authorize(deniedRead), rewrittenHandler(plugin.store, collection.name, appParam));
  }
  router.get(`/pull/${full}`, auditing('pull'), authenticate(collection.readRoles, resolver), limit('pull'), authorize(deniedRead), pullHandler(plugin));
}

/** `GET /list/<prefix>` of one collection: a page of batch refs after `?after=`. */
function listHandler(plugin: EventsServerPlugin): RequestHandler {
  const t = plugin.template;
  return async function list(req: Request, res: Response): Promise<void> {
    const params = paramsOf(req, t.prefixParams);
    const limit = parseLimit(req.query.limit);
    const after = parseAfter(req.query.after);
    const result = await plugin.list(params, after, limit);
    // After the listing (shared/rollup/retention.ts): a cursor older than what retention deleted gets 410.
    const deletedThrough = await checkListCursor(plugin.store, listPrefix(t, params), after);
    if (deletedThrough !== null) res.setHeader(RAW_DELETED_HEADER, deletedThrough);
    res.status(200).json(result);
  };
}
