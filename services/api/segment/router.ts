/**
 * The Segment tracking API, a second door to the push path: `POST /v1/batch`, `/v1/track`,
 * `/v1/identify`, `/v1/page`, `/v1/screen`, `/v1/group`, `/v1/alias` (and analytics.js' short
 * forms `/v1/b`, `/v1/t`, `/v1/i`, `/v1/p`, `/v1/s`, `/v1/g`, `/v1/a`). The write key (HTTP Basic
 * user name, or the body's `writeKey`) names the app and collection; the body is translated into
 * the push envelope (./translate.ts) as it is read, then the same admission steps and
 * `PushService.accept` run as for a Starfish push: one request is one batch, answered 200
 * `{"success": true}` once durable. docs/segment.md.
 */
import express, { type NextFunction, type Request, type RequestHandler, type Response, type Router } from 'express';
import type { ByteBudget } from '../../../shared/byte-budget.js';
import type { CollectionConfig, SyncConfig } from '../../../shared/config.js';
import { BodyError, discardRest, readBody } from '../body.js';
import { type CorsOptions, cors } from '../edge/cors.js';
import type { RateLimiter } from '../edge/rate-limit.js';
import { resolveCounters } from '../edge/rate-limit.js';
import { methodNotAllowed } from '../edge/methods.js';
import { securityHeaders } from '../edge/security-headers.js';
import { requestTimeout } from '../edge/timeout.js';
import { ApiError, errorAnswer, jsonErrorHandler, outcomeAnswer, refusalAnswer, sendError } from '../error-map.js';
import { type EventsServerPlugin, pushResultOf } from '../plugin.js';
import { Admission, type BodyRefusal, type BodySource, type ReadBody, type Refused } from '../push/admission/index.js';
import { parseContentEncoding } from '../push/admission/content.js';
import type { PushOutcome } from '../push/outcome.js';
import type { RouterObserver } from '../router.js';
import { SEGMENT_PATHS as ROUTES, type SegmentRoute, translateSegment } from './translate.js';
import { type WriteKeyTarget, type WriteKeys, basicUser } from './write-keys.js';

/** The door reads every body as JSON (see `admit`). */
const SEGMENT_MIME_TYPES = ['application/json'];
/** The last path segment the push routes discard; the server mints the batch id. */
const MINTED = 'segment';
/** The least Retry-After of a 503 for Redis away (see segmentWait). */
const UNAVAILABLE_RETRY_AFTER_SECONDS = 5;

export interface SegmentRouterOptions {
  writeKeys: WriteKeys;
  config: SyncConfig;
  plugins: readonly EventsServerPlugin[];
  limiter?: RateLimiter | null;
  cors?: CorsOptions;
  shedReason?: () => string | null;
  inflightBudget?: ByteBudget;
  observer?: RouterObserver;
  /** REQUEST_TIMEOUT_MS, as on the sync routes (0 or unset: none). */
  requestTimeoutMs?: number;
}

/** One collection's door: its admission (the push path's steps) and plugin. */
interface Door {
  collection: CollectionConfig;
  plugin: EventsServerPlugin;
  admission: Admission;
  limit: RequestHandler | null;
}

/** The Segment routes under `/v1`, for every collection some write key names. */
export function createSegmentRouter(opts: SegmentRouterOptions): Router {
  const doors = new Map(opts.writeKeys.collections.map((name) => [name, doorOf(opts, name)]));
  const router = express.Router({ caseSensitive: true, strict: false });
  if (opts.cors) router.use('/v1', cors(opts.cors));
  router.use('/v1', securityHeaders(true));
  if (opts.requestTimeoutMs && opts.requestTimeoutMs > 0)
    router.use(
      '/v1',
      requestTimeout(opts.requestTimeoutMs, () => opts.observer?.timedOut?.()),
    );
  for (const [path, route] of ROUTES) router.post(`/v1/${path}`, handler(opts, doors, route));
  // Another method answers 405 with Allow, as every other route does (it was a 404).
  for (const [path] of ROUTES) router.all(`/v1/${path}`, methodNotAllowed(['POST']));
  router.use('/v1', jsonErrorHandler());
  return router;
}

function doorOf(opts: SegmentRouterOptions, name: string): Door {
  const collection = opts.config.collections.find((c) => c.name === name);
  const plugin = opts.plugins.find((p) => p.collection === name);
  if (!collection || !plugin) throw new Error(`segment: no collection "${name}"`);
  const admission = new Admission({
    collection: { ...collection, allowedMimeTypes: SEGMENT_MIME_TYPES },
    template: plugin.template,
    shedReason: opts.shedReason,
    inflightBudget: opts.inflightBudget,
    encodesBody: (bytes) => plugin.encodesBody(bytes),
    needsText: plugin.mode === 'inline',
    keyClaimed: (params, key, decodedHash) => plugin.keyClaimed(params, key, decodedHash),
    observer: opts.observer,
  });
  const push = resolveCounters(collection, opts.config.rateLimit).push;
  const limit = opts.limiter && push.length > 0 ? opts.limiter.middleware(collection.name, push) : null;
  return { collection, plugin, admission, limit };
}

/** Runs one middleware as a promise: resolves when it calls next(), rejects with what it passed. */
function run(mw: RequestHandler, req: Request, res: Response): Promise<void> {
  return new Promise((resolve, reject) => {
    void mw(req, res, ((err?: unknown) => (err ? reject(err) : resolve())) as NextFunction);
  });
}

/** The translated body of a request read by the push path's reader: what admission's step 4 gets. */
function translated(
  raw: ReadBody,
  route: SegmentRoute,
  o: Parameters<BodySource['read']>[0],
  keyOut?: { writeKey?: string },
): ReadBody | BodyRefusal {
  const t = translateSegment(raw.bytes, route, o.maxBytes * 2);
  if (!t.ok) return { reason: t.code === 'too_large' ? 'too_large' : 'unreadable', code: t.code, detail: t.error };
  if (keyOut) keyOut.writeKey = t.writeKey;
  if (o.budget) {
    if (!o.budget.tryTake(t.bytes.length, o.held.bytes))
      return {
        reason: 'over_budget',
        detail: 'overloaded: the memory budget for pushes in flight (MAX_INFLIGHT_BYTES) is spent; retry later',
        retryAfter: 1,
      };
    o.held.bytes += t.bytes.length;
  }
  // Idempotency by messageId: the same messageIds are the same batch (SDKs resend them with a new sentAt).
  const key =
    t.messageIdsHash === undefined
      ? {}
      : { idempotencyKey: `segment-${t.messageIdsHash}`, decodedHash: t.messageIdsHash };
  return { bytes: t.bytes, hash: raw.hash, decodedHash: raw.decodedHash, sentBytes: raw.sentBytes, ...key };
}

function reading(req: Request, o: Parameters<BodySource['read']>[0]): Promise<ReadBody | BodyRefusal> {
  return readBody(req, o).catch((err: unknown) => {
    if (err instanceof BodyError) return { reason: err.reason, detail: err.message, headers: err.headers };
    throw err;
  });
}

/** The request's body, read and translated within the door collection's limits. */
function bodySource(req: Request, route: SegmentRoute): BodySource {
  return {
    read: async (o) => {
      const raw = await reading(req, o);
      return 'bytes' in raw ? translated(raw, route, o) : raw;
    },
    discard: () => discardRest(req),
  };
}

function unauthorized(message: string): ApiError {
  return new ApiError('unauthorized', message, { 'WWW-Authenticate': 'Basic realm="segment"' });
}

function handler(opts: SegmentRouterOptions, doors: Map<string, Door>, route: SegmentRoute): RequestHandler {
  return async function segment(req: Request, res: Response): Promise<void> {
    const user = basicUser(req.headers.authorization);
    if (user === null)
      return refuse(req, res, opts, doors, unauthorized('Authorization must be Basic with the write key as user name'));
    if (user !== undefined) {
      const target = opts.writeKeys.lookup(user);
      if (!target) return refuse(req, res, opts, doors, unauthorized('unknown write key'));
      return admit(opts, doors, target, req, res, bodySource(req, route));
    }
    return admitByBodyKey(opts, doors, route, req, res);
  };
}

/** Refuses before admission: drains the body so the answer arrives, counts it. */
async function refuse(
  req: Request,
  res: Response,
  opts: SegmentRouterOptions,
  doors: Map<string, Door>,
  err: ApiError,
): Promise<void> {
  const answer = err.code === 'unauthorized' ? await deniedAnswer(req, res, opts, doors, err) : err;
  const headers = await discardRest(req);
  sendError(res, errorAnswer(new ApiError(answer.code, answer.message, { ...answer.headers, ...headers })));
}

/**
 * A refused write key, counted and held against the push rate limits of every collection the door
 * serves, as the sync routes count refused credentials (an anonymous request, bucketed by its
 * address): guessing keys is limited like any other request, so past the limit it is a 429.
 */
async function deniedAnswer(
  req: Request,
  res: Response,
  opts: SegmentRouterOptions,
  doors: Map<string, Door>,
  err: ApiError,
): Promise<ApiError> {
  opts.observer?.authDenied?.(401);
  opts.observer?.rejected?.('unauthorized');
  for (const door of doors.values()) {
    if (!door.limit) continue;
    try {
      await run(door.limit, req, res);
    } catch (limited) {
      if (limited instanceof ApiError) return limited;
      throw limited;
    }
  }
  return err;
}

/** The push path for a write key's app: rate limits, admission, `PushService.accept`, Segment's answer. */
async function admit(
  opts: SegmentRouterOptions,
  doors: Map<string, Door>,
  target: WriteKeyTarget,
  req: Request,
  res: Response,
  body: BodySource,
): Promise<void> {
  const door = doors.get(target.collection);
  if (!door) throw new Error(`segment: no door for "${target.collection}"`);
  if (door.limit) await run(door.limit, req, res);
  const appEvents = door.collection.rateLimit?.appEvents;
  const limiter = opts.limiter;
  await door.admission.admit(
    {
      params: {
        ...Object.fromEntries(door.plugin.template.prefixParams.map((p) => [p, target.app])),
        [door.plugin.template.batchParam]: MINTED,
      },
      // Read as JSON whatever the type says: analytics.js sends text/plain (no preflight), RudderStack's
      // node SDK a gzip Buffer under axios' default type; the body is validated as UTF-8 JSON anyway.
      contentType: 'application/json',
      contentEncoding: req.headers['content-encoding'],
      idempotencyKey: undefined,
      body,
      ...(limiter && appEvents
        ? {
            appEvents: async (prefix: string, events: number): Promise<Refused | null> =>
              await limiter
                .admitEvents(door.collection.name, prefix, appEvents, events, res)
                .then((r) => r && { kind: 'refused' as const, ...r }),
          }
        : {}),
    },
    async (r) => {
      if (r.kind === 'refused') return sendError(res, refusalAnswer(r.code, r.detail, r.retryAfter, r.headers));
      const outcome = await door.plugin.accept(r.request);
      if (outcome.kind === 'unavailable') opts.observer?.unavailable?.();
      if (outcome.kind === 'conflict') opts.observer?.rejected?.('idempotency_conflict');
      const result = pushResultOf(outcome);
      if (!result)
        return sendError(
          res,
          outcomeAnswer(segmentWait(outcome)) ?? errorAnswer(new Error(`push outcome ${outcome.kind} has no answer`)),
        );
      opts.observer?.pushed?.(result, r.sentBytes);
      res.status(200).json({ success: true });
    },
  );
}

/**
 * No Authorization header: the write key is the body's `writeKey` (analytics.js in a browser). The
 * body is read first, within the largest maxBodyBytes of the keyed collections and the in-flight
 * budget, then handed to the key's door (which checks its own collection's limit again).
 */
async function admitByBodyKey(
  opts: SegmentRouterOptions,
  doors: Map<string, Door>,
  route: SegmentRoute,
  req: Request,
  res: Response,
): Promise<void> {
  const coding = parseContentEncoding(req.headers['content-encoding']);
  if (!coding.ok) return refuse(req, res, opts, doors, new ApiError('content_encoding', coding.error));
  const maxBytes = Math.max(...[...doors.values()].map((d) => d.collection.maxBodyBytes));
  const held = { bytes: 0 };
  try {
    const o = { maxBytes, coding: coding.coding, budget: opts.inflightBudget, held };
    const raw = await reading(req, o);
    if (!('bytes' in raw))
      return sendError(
        res,
        refusalAnswer(
          raw.reason === 'too_large'
            ? 'too_large'
            : raw.reason === 'over_budget'
              ? 'overloaded'
              : raw.reason === 'bad_encoding'
                ? 'bad_encoding'
                : 'bad_request',
          raw.detail,
          raw.retryAfter,
          raw.headers,
        ),
      );
    const found: { writeKey?: string } = {};
    const t = translated(raw, route, o, found);
    if (!('bytes' in t)) return sendError(res, refusalAnswer(t.code ?? 'bad_request', t.detail, t.retryAfter));
    const key = found.writeKey;
    const target = key === undefined ? undefined : opts.writeKeys.lookup(key);
    if (!target) {
      const denied = unauthorized(
        key === undefined ? "no write key: send it as the Basic user name or the body's writeKey" : 'unknown write key',
      );
      return sendError(res, errorAnswer(await deniedAnswer(req, res, opts, doors, denied)));
    }
    const given = t;
    const body: BodySource = {
      read: async (inner) => {
        // The budget this request holds moves to admission, which gives it back once answered.
        inner.held.bytes += held.bytes;
        held.bytes = 0;
        if (raw.bytes.length > inner.maxBytes)
          return {
            reason: 'too_large',
            detail: `body is ${raw.bytes.length} bytes (decoded); this collection's maxBodyBytes is ${inner.maxBytes}`,
          };
        return given;
      },
      discard: async () => ({}),
    };
    return await admit(opts, doors, target, req, res, body);
  } finally {
    opts.inflightBudget?.give(held.bytes);
  }
}

/**
 * Redis away (or another `unavailable` outcome) asks a Segment client to wait at least
 * {@link UNAVAILABLE_RETRY_AFTER_SECONDS}. RudderStack's node SDK honours Retry-After and retries 3
 * times by default: at the push path's 1 s it gives up after about 3 s of outage, at 5 s it rides
 * out about 15 s. Segment's own SDKs ignore the header on a 503 (their backoff: 0.5 s doubling).
 */
function segmentWait(outcome: PushOutcome): PushOutcome {
  if (outcome.kind !== 'unavailable') return outcome;
  return { ...outcome, retryAfter: Math.max(outcome.retryAfter ?? 1, UNAVAILABLE_RETRY_AFTER_SECONDS) };
}
