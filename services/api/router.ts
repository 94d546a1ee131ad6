import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import express, { type NextFunction, type Request, type RequestHandler, type Response, type Router } from 'express';
import {
  type CollectionConfig,
  RATE_LIMIT_PUSH_ON_ERROR_DEFAULT,
  type SyncConfig,
  type SyncConfigInput,
  TRUSTED_PROXY_HOPS_DEFAULT,
  parseSyncConfig,
} from '../../shared/config.js';
import { StoreError } from '../../shared/errors.js';
import {
  ApiError,
  type ErrorLog,
  errorAnswer,
  jsonErrorHandler,
  outcomeAnswer,
  refusalAnswer,
  sendError,
} from './error-map.js';
import { queryInteger } from './params.js';
import { BatchRef, ListLimit, PathParam, fits } from './contract/schemas.js';
import { parseBatchRef } from '../../shared/ids.js';
import { capNonceKeyPrefix, rateLimitKeyPrefix } from '../../shared/redis/keyspace.js';
import {
  type StoragePathTemplate,
  batchKey,
  checkParamValue,
  listPrefix,
  parseStoragePath,
  routePattern,
} from '../../shared/paths.js';
import { RAW_DELETED_HEADER, checkListCursor } from '../../shared/rollup/retention.js';
import type { ByteRange, ObjectStore } from '../../shared/store/types.js';
import type { Cluster, Redis } from 'ioredis';
import { type RoleResolver, TokenRoles, authenticate, authorize, tokenRoleResolver } from './auth.js';
import { type AuditLogger, audit } from './edge/audit.js';
import {
  type CapAuthOptions,
  MemoryNonceStore,
  type NonceStore,
  RedisNonceStore,
  capOrElse,
  createCapRoleResolver,
} from './edge/cap-auth.js';
import { type ConfigEndpointOptions, configHandler } from './config-route.js';
import { type CounterStore, MemoryCounterStore, RedisCounterStore } from './edge/counters.js';
import { type CorsOptions, cors } from './edge/cors.js';
import { type BucketMode, type RateAction, RateLimiter, resolveCounters } from './edge/rate-limit.js';
import { type SecurityHeadersOptions, securityHeaders } from './edge/security-headers.js';
import { requestTimeout } from './edge/timeout.js';
import { noImplicitConditional } from './edge/conditional.js';
import { methodNotAllowed } from './edge/methods.js';
import { BodyError, discardRest, readBody } from './body.js';
import { envelopeScanThread } from '../../shared/envelope-scan-thread.js';
import type { RejectReason, ShedReason } from './metrics.js';
import type { ByteBudget } from '../../shared/byte-budget.js';
import { contentRange, decideRange, ifRangeAllows, unsatisfiedRange } from './range.js';
import { type EventsServerPlugin, PARQUET_MIME_TYPE, type PushResult, pushResultOf } from './plugin.js';
import { Admission, type AdmissionInput, type BodySource, type Refused } from './push/admission/index.js';
import type { PushOutcome } from './push/outcome.js';
import { REWRITTEN_ROUTE, rewrittenHandler, rewrittenRoles } from './list/rewritten.js';

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
  /** Each admission step's time, by the step's name (push/admission/). */
  stepSeconds?(step: string, seconds: number): void;
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
  capAuth?: Omit<CapAuthOptions, 'nonceStore' | 'collections'> & {
    nonceStore?: NonceStore | Redis | Cluster;
    nonceKeyPrefix?: string;
  };
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

export { type ErrorLog, jsonErrorHandler } from './error-map.js';

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
        if (!stream)
          throw new StoreError(`object ${JSON.stringify(key)} vanished while being read`, { retriable: true });
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

/** Checks every route param; a bad one is a `bad_param` refusal naming it. */
function paramsOf(req: Request, names: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  const raw = req.params as Record<string, string | undefined>;
  for (const name of names) {
    const value = raw[name] ?? '';
    const problem = fits(PathParam, value) ? null : (checkParamValue(value) ?? 'is not a valid parameter');
    if (problem) throw new ApiError('bad_param', `path parameter "${name}" ${problem}`);
    out[name] = value;
  }
  return out;
}

function parseLimit(raw: unknown): number {
  return queryInteger(ListLimit, 'limit', raw);
}

function parseAfter(raw: unknown): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string') throw new ApiError('bad_param', 'after must be a single batch id');
  const bare = fits(BatchRef, raw) ? parseBatchRef(raw) : null;
  if (bare === null)
    throw new ApiError(
      'bad_param',
      'after must be a batch id like 1782933157690-0000-735223 (with or without .parquet)',
    );
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

/** The request's body, for admission: read within its limits (body.ts), a refusal as a typed value. */
function bodySourceOf(req: Request): BodySource {
  return {
    read: (o) =>
      readBody(req, o).catch((err: unknown) => {
        if (err instanceof BodyError) return { reason: err.reason, detail: err.message, headers: err.headers };
        throw err;
      }),
    discard: () => discardRest(req),
  };
}

/** The HTTP request as admission reads it: params, the headers it checks, the body, the per-app budget. */
function admissionInputOf({ collection, limiter }: PushRoute, req: Request, res: Response): AdmissionInput {
  const appEvents = collection.rateLimit?.appEvents;
  return {
    params: req.params as Record<string, string | undefined>,
    contentType: req.headers['content-type'],
    contentEncoding: req.headers['content-encoding'],
    idempotencyKey: req.headers['idempotency-key'],
    body: bodySourceOf(req),
    ...(limiter && appEvents
      ? {
          appEvents: async (prefix: string, events: number): Promise<Refused | null> => {
            const r = await limiter.admitEvents(collection.name, prefix, appEvents, events, res);
            return r && { kind: 'refused', ...r };
          },
        }
      : {}),
  };
}

/** Answers a push's outcome: 200 with its id, or its error through the map; tells the observer. */
function answerPush(
  res: Response,
  outcome: PushOutcome,
  observer: RouterObserver | undefined,
  sentBytes: number,
): void {
  if (outcome.kind === 'unavailable') observer?.unavailable?.();
  if (outcome.kind === 'conflict') observer?.rejected?.('idempotency_conflict');
  const result = pushResultOf(outcome);
  if (!result)
    return sendError(
      res,
      outcomeAnswer(outcome) ?? errorAnswer(new Error(`push outcome ${outcome.kind} has no answer`)),
    );
  observer?.pushed?.(result, sentBytes);
  res.status(200).json({ hash: result.hash, batchId: result.batchId });
}

/** `POST /push/<storagePath>` of one collection: admission (push/admission/), then the push path. */
function pushHandler(route: PushRoute): RequestHandler {
  const { opts, plugin, collection } = route;
  const admission = new Admission({
    collection,
    template: plugin.template,
    appPattern: opts.appPattern,
    shedReason: opts.shedReason,
    inflightBudget: opts.inflightBudget,
    encodesBody: (bytes) => plugin.encodesBody(bytes),
    needsText: plugin.mode === 'inline',
    scanThread: envelopeScanThread,
    keyClaimed: (params, key, decodedHash) => plugin.keyClaimed(params, key, decodedHash),
    observer: opts.observer,
  });
  return async function push(req: Request, res: Response): Promise<void> {
    await admission.admit(admissionInputOf(route, req, res), async (r) => {
      if (r.kind === 'refused') return sendError(res, refusalAnswer(r.code, r.detail, r.retryAfter, r.headers));
      answerPush(res, await plugin.accept(r.request), opts.observer, r.sentBytes);
    });
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
    const range = ifRangeAllows(req.get('if-range'), etag)
      ? decideRange(req.headers.range, size)
      : ({ kind: 'full' } as const);
    if (range.kind === 'unsatisfiable') {
      // An error must not be cached for a year like the file itself.
      res.removeHeader('Cache-Control');
      throw new ApiError('range_not_satisfiable', `range not satisfiable: the batch has ${size} bytes`, {
        'Content-Range': unsatisfiedRange(size),
      });
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
function withCapAuth(
  opts: SyncRouterOptions,
  collections: readonly { name: string; storagePath: string }[],
  others: RoleResolver,
): RoleResolver {
  const o = opts.capAuth;
  if (!o) return others;
  const given = o.nonceStore;
  const nonceStore =
    given === undefined
      ? new MemoryNonceStore()
      : 'claim' in given
        ? given
        : new RedisNonceStore(given, o.nonceKeyPrefix ?? capNonceKeyPrefix());
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
  const mount: MountContext = {
    router,
    opts,
    resolver,
    noStore: useEdgeMiddleware(router, opts),
    served: [],
    ...rateLimits(opts, config),
  };
  const ours: CollectionConfig[] = [];
  for (const collection of config.collections) {
    const plugin = pluginOf(opts, collection);
    // No plugin: no route, so the host app's next handler (its own Starfish router) serves it.
    if (!plugin) continue;
    mountCollection(mount, collection, plugin);
    ours.push(collection);
  }
  // After every collection's routes, so one collection's path never hides another's method.
  for (const [path, methods] of mount.served) router.all(path, methodNotAllowed(methods));
  // Any other path under a sync prefix (a push without its last segment, say) is told what the routes look like.
  router.use(
    SYNC_PREFIXES.map((p) => `/${p}`),
    unmatchedSyncRoute(ours),
  );
  // A host app's default error page is HTML: the router answers its own errors as JSON.
  router.use(jsonErrorHandler(opts.log));
  return router;
}

const SYNC_PREFIXES = ['push', 'pull', 'list'] as const;

function decodeSegment(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}
type SyncPrefix = (typeof SYNC_PREFIXES)[number];

/** The routes of each sync prefix, as a reader writes them (`POST /push/events/{app}/{batchId}`), without the base path. */
function routeShapes(collections: readonly CollectionConfig[]): Record<SyncPrefix, string[]> {
  const shape = (segments: StoragePathTemplate['segments']): string =>
    segments.map((s) => (s.kind === 'param' ? `{${s.name}}` : s.value)).join('/');
  const templates = collections.map((c) => ({ c, t: parseStoragePath(c.storagePath) }));
  return {
    push: templates.map(({ t }) => `POST /push/${shape(t.segments)}`),
    pull: templates.map(({ t }) => `GET /pull/${shape(t.segments)}`),
    list: templates.filter(({ c }) => c.listable).map(({ t }) => `GET /list/${shape(t.segments.slice(0, -1))}`),
  };
}

/**
 * The first segment of each served collection's storagePath (null: it starts with a parameter, so
 * any path may be meant for it).
 */
function firstSegments(collections: readonly CollectionConfig[]): (string | null)[] {
  return collections.map((c) => {
    const first = parseStoragePath(c.storagePath).segments[0];
    return first?.kind === 'param' ? null : (first?.value ?? null);
  });
}

/**
 * The end of the sync prefixes: a path under one of our collections that no route serves
 * (`POST /push/events/myapp`, its last segment forgotten) answers 404 `not_found` naming the
 * request and what that prefix's routes look like, under the base path the router is mounted at.
 * A path under no collection of ours goes on to the host app's next handler (a Starfish router
 * mounted after ours serves its own collections).
 */
function unmatchedSyncRoute(collections: readonly CollectionConfig[]): RequestHandler {
  const shapes = routeShapes(collections);
  const firsts = firstSegments(collections);
  return function unmatchedSyncRoute(req: Request, _res: Response, next: NextFunction): void {
    const segment = decodeSegment(req.path.split('/')[1] ?? '');
    // The prefix alone (`POST /push`) is told too; a path under another collection is not ours.
    if (segment !== '' && !firsts.some((f) => f === null || f === segment)) {
      next();
      return;
    }
    // Mounted at /<prefix>: baseUrl is <base path>/<prefix>.
    const prefix = SYNC_PREFIXES.find((p) => req.baseUrl.endsWith(`/${p}`)) ?? 'push';
    const base = req.baseUrl.slice(0, -(prefix.length + 1));
    const path = (req.originalUrl.split('?')[0] ?? '').slice(0, 300);
    const routes = shapes[prefix].map((r) => r.replace(' /', ` ${base}/`));
    const hint =
      routes.length > 0
        ? `${prefix} routes look like ${routes.join(' or ')}`
        : `no collection is ${prefix === 'list' ? 'listable' : 'configured'}`;
    next(new ApiError('not_found', `no route ${req.method} ${path}; ${hint}`));
  };
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
  if (opts.requestTimeoutMs && opts.requestTimeoutMs > 0)
    router.use(
      syncPaths,
      requestTimeout(opts.requestTimeoutMs, () => opts.observer?.timedOut?.()),
    );
  return (_req, res, next) => {
    if (secure) res.setHeader('Cache-Control', 'no-store');
    next();
  };
}

/** Each collection's rate-limit counters, and the limiter (null when no collection is limited). */
function rateLimits(opts: SyncRouterOptions, config: SyncConfig): Pick<MountContext, 'counters' | 'limiter'> {
  const { observer } = opts;
  const counters = new Map(config.collections.map((c) => [c.name, resolveCounters(c, config.rateLimit)]));
  const limited =
    config.collections.some((c) => c.rateLimit?.appEvents) ||
    [...counters.values()].some((a) => a.push.length + a.pull.length + a.list.length > 0);
  if (!limited) return { counters, limiter: null };
  const store = opts.rateLimitStore;
  const limiter = new RateLimiter({
    store: store === undefined ? new MemoryCounterStore() : 'hit' in store ? store : new RedisCounterStore(store),
    keyPrefix: opts.rateLimitKeyPrefix ?? rateLimitKeyPrefix(),
    trustedProxyHops: opts.trustedProxyHops ?? TRUSTED_PROXY_HOPS_DEFAULT,
    pushOnError: opts.rateLimitPushOnError ?? RATE_LIMIT_PUSH_ON_ERROR_DEFAULT,
    observer: {
      limited: observer?.rateLimited,
      storeFailed: observer?.rateLimitStoreFailed,
      checkSeconds: observer?.rateLimitCheckSeconds,
    },
  });
  return { counters, limiter };
}

/** The events plugin of `collection` (none: the collection is left to the host app's next handler); throws when its storagePath differs from the config's. */
function pluginOf(opts: SyncRouterOptions, collection: CollectionConfig): EventsServerPlugin | undefined {
  const plugin = opts.plugins.find((p) => p.collection === collection.name);
  if (!plugin) return undefined;
  if (plugin.template.source !== collection.storagePath) {
    throw new Error(
      `collection "${collection.name}": plugin storagePath "${plugin.template.source}" differs from the config's "${collection.storagePath}"`,
    );
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
    opts.auditLogger && (action !== 'push' || opts.auditPush)
      ? audit(action, collection.name, opts.auditLogger)
      : passThrough;
  const rules = m.counters.get(collection.name) ?? { push: [], pull: [], list: [] };
  const limit = (action: RateAction): RequestHandler =>
    limiter && rules[action].length > 0 ? limiter.middleware(collection.name, rules[action]) : passThrough;
  const t = plugin.template;
  const full = routePattern(t.segments);
  const prefixRoute = routePattern(t.segments.slice(0, -1));
  m.served.push([`/push/${full}`, ['POST']], [`/pull/${full}`, ['GET', 'HEAD']]);
  if (collection.listable) m.served.push([`/list/${prefixRoute}`, ['GET', 'HEAD']]);

  router.post(
    `/push/${full}`,
    auditing('push'),
    authenticate(collection.writeRoles, resolver),
    limit('push'),
    authorize(denied),
    pushHandler({ opts, plugin, collection, limiter }),
  );
  if (collection.listable) {
    router.get(
      `/list/${prefixRoute}`,
      auditing('list'),
      noStore,
      authenticate(collection.readRoles, resolver),
      limit('list'),
      authorize(deniedRead),
      listHandler(plugin),
    );
  }
  // The rewritten listing (issue 36) names one app: only for a storagePath with one list parameter.
  const appParam = collection.listable && t.prefixParams.length === 1 ? t.prefixParams[0] : undefined;
  if (appParam !== undefined) {
    const path = `/list/${prefixRoute}/${REWRITTEN_ROUTE}`;
    m.served.push([path, ['GET', 'HEAD']]);
    router.get(
      path,
      auditing('list'),
      noStore,
      authenticate(rewrittenRoles(collection.readRoles), resolver),
      limit('list'),
      authorize(deniedRead),
      rewrittenHandler(plugin.store, collection.name, appParam),
    );
  }
  router.get(
    `/pull/${full}`,
    auditing('pull'),
    authenticate(collection.readRoles, resolver),
    limit('pull'),
    authorize(deniedRead),
    pullHandler(plugin),
  );
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
