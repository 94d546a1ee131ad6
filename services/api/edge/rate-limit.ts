import { createHash } from 'node:crypto';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { CollectionConfig, GlobalRateLimit, RateLimitRule } from '../../../shared/config.js';
import { ApiError } from '../error-map.js';
import { appBudgetKey, rateLimitKey } from '../../../shared/redis/keyspace.js';
import { withTimeout } from '../../../shared/timeout.js';
import { authOf } from '../auth.js';
import type { CounterStore, Hit } from './counters.js';

export type RateAction = 'push' | 'pull' | 'list';
export type BucketMode = 'identity' | 'ip' | 'identity+ip';

/** One counter a request is checked against. */
export interface RateCounter {
  action: RateAction;
  mode: BucketMode;
  /** `s` single-counter rule, `i`/`p` the identity/ip sub-limits (keeps their counters apart). */
  kind: 's' | 'i' | 'p';
  windowMs: number;
  maxRequests: number;
}

/**
 * The counters of each action of a collection, resolved as the reference does: a rule's
 * missing `windowMs`/`maxRequests` come from the collection's flat fields, then the global
 * `rateLimit`. The flat fields alone make an implicit push rule, and so does a global
 * `rateLimit` (the reference's legacy form).
 */
export function resolveCounters(
  collection: Pick<CollectionConfig, 'rateLimit'>,
  global: GlobalRateLimit | undefined,
): Record<RateAction, RateCounter[]> {
  const out: Record<RateAction, RateCounter[]> = { push: [], pull: [], list: [] };
  const rl = collection.rateLimit;
  if (!rl) return out;
  for (const action of ['push', 'pull', 'list'] as const) {
    let rule: RateLimitRule | undefined = rl[action];
    const flat = rl.windowMs !== undefined || rl.maxRequests !== undefined || rl.bucket !== undefined;
    if (!rule && action === 'push' && (flat || global)) rule = { bucket: rl.bucket };
    if (!rule) continue;
    const resolve = (dim?: {
      windowMs?: number;
      maxRequests?: number;
    }): { windowMs: number; maxRequests: number } | null => {
      const windowMs = dim?.windowMs ?? rule.windowMs ?? rl.windowMs ?? global?.windowMs;
      const maxRequests = dim?.maxRequests ?? rule.maxRequests ?? rl.maxRequests ?? global?.maxRequests;
      return windowMs === undefined || maxRequests === undefined ? null : { windowMs, maxRequests };
    };
    if (rule.identity || rule.ip) {
      const i = rule.identity && resolve(rule.identity);
      const p = rule.ip && resolve(rule.ip);
      if (i) out[action].push({ action, mode: 'identity', kind: 'i', ...i });
      if (p) out[action].push({ action, mode: 'ip', kind: 'p', ...p });
    } else {
      const r = resolve();
      if (r) out[action].push({ action, mode: rule.bucket ?? 'identity', kind: 's', ...r });
    }
  }
  return out;
}

/**
 * The client's address for `ip` buckets. With `trustedProxyHops` 0 the socket peer, whatever
 * `X-Forwarded-For` says (a client could write anything there). With N > 0, the Nth entry from
 * the right of `X-Forwarded-For` (each trusted proxy appends the address it saw); a shorter
 * header is not the trusted shape and falls back to the peer.
 */
export function clientIp(req: Request, trustedProxyHops: number): string {
  const peer = normalizeIp(req.socket.remoteAddress ?? 'unknown');
  if (trustedProxyHops <= 0) return peer;
  const raw = req.headers['x-forwarded-for'];
  const hops = (Array.isArray(raw) ? raw.join(',') : (raw ?? ''))
    .split(',')
    .map((h) => h.trim())
    .filter(Boolean);
  return hops.length >= trustedProxyHops ? normalizeIp(hops[hops.length - trustedProxyHops] as string) : peer;
}

function normalizeIp(ip: string): string {
  return ip.startsWith('::ffff:') ? ip.slice(7) : ip;
}

/** What the limiter reports, for metrics (fixed label values: never an app or identity). */
export interface RateLimitObserver {
  limited?(action: RateAction, rule: BucketMode | 'app_events'): void;
  /** The counter store failed; `open` means the request went through anyway. */
  storeFailed?(action: RateAction, outcome: 'open' | 'closed'): void;
  checkSeconds?(seconds: number): void;
}

export interface RateLimiterOptions {
  store: CounterStore;
  /** Key prefix of every counter (e.g. `ingest-rl:<queue name>`: shared/redis/keyspace.ts, rateLimitKeyPrefix). */
  keyPrefix: string;
  trustedProxyHops: number;
  /** Redis unreachable: push goes through (`open`) or gets 503 (`closed`). Reads always go through. */
  pushOnError: 'open' | 'closed';
  observer?: RateLimitObserver;
  /** Bound on one check, so a hung Redis cannot hold requests. */
  timeoutMs?: number;
}

const digest = (s: string): string => createHash('sha256').update(s).digest('hex').slice(0, 24);

function setLimitHeaders(res: Response, max: number, remaining: number, resetMs: number, windowMs: number): void {
  res.setHeader('RateLimit-Limit', String(max));
  res.setHeader('RateLimit-Remaining', String(Math.max(0, remaining)));
  res.setHeader('RateLimit-Reset', String(Math.max(1, Math.ceil(resetMs / 1000))));
  res.setHeader('RateLimit-Policy', `${max};w=${Math.max(1, Math.round(windowMs / 1000))}`);
}

/** Fixed-window rate limits shared by every API instance (through the counter store). */
/** A push the per-app events budget refuses: over the budget, or the counter store down (push fails closed). */
export interface AppEventsRefusal {
  code: 'rate_limited' | 'unavailable';
  detail: string;
  retryAfter: number;
}

export class RateLimiter {
  constructor(private readonly o: RateLimiterOptions) {}

  private failOpen(action: RateAction): boolean {
    return action !== 'push' || this.o.pushOnError === 'open';
  }

  /**
   * Middleware factory for one collection action. Runs between `authenticate` and `authorize`
   * (auth.ts): the identity bucket needs the caller, and a request whose credentials are refused
   * counts too, as an anonymous one (its address), so guessing tokens is limited like any other
   * request: against a rule of 4 per window the fifth wrong token gets 429, not 401. Every
   * counter of the rule counts the request, then the request is refused (429, `Retry-After`,
   * `RateLimit-*`) if any is over; the headers describe the tightest one.
   */
  middleware(collection: string, counters: readonly RateCounter[]): RequestHandler {
    const o = this.o;
    return (req: Request, res: Response, next: NextFunction): void => {
      if (counters.length === 0) return next();
      const who = authOf(res)?.identity ?? null;
      const ip = clientIp(req, o.trustedProxyHops);
      const t0 = performance.now();
      const checks = counters.map((c) => {
        const bucket =
          c.mode === 'ip' ? `ip:${ip}` : c.mode === 'identity+ip' ? `${who ?? 'anonymous'}|${ip}` : (who ?? `ip:${ip}`);
        const key = rateLimitKey(o.keyPrefix, collection, c.action, c.kind, digest(bucket));
        return o.store.hit(key, c.windowMs).then((h) => ({ c, h }));
      });
      withTimeout(Promise.all(checks), o.timeoutMs ?? 1000, 'rate-limit check').then(
        (results) => {
          o.observer?.checkSeconds?.((performance.now() - t0) / 1000);
          const over = results.filter(({ c, h }) => h.count > c.maxRequests);
          // Tightest: an exceeded counter with the longest wait, else the one with least room.
          const pick = (xs: { c: RateCounter; h: Hit }[], score: (x: { c: RateCounter; h: Hit }) => number) =>
            xs.reduce((a, b) => (score(b) > score(a) ? b : a));
          const head =
            over.length > 0 ? pick(over, (x) => x.h.resetMs) : pick(results, (x) => -(x.c.maxRequests - x.h.count));
          setLimitHeaders(res, head.c.maxRequests, head.c.maxRequests - head.h.count, head.h.resetMs, head.c.windowMs);
          if (over.length === 0) return next();
          for (const { c } of over) o.observer?.limited?.(c.action, c.mode);
          const retry = Math.max(1, Math.ceil(head.h.resetMs / 1000));
          if (req.method === 'POST') req.resume();
          next(
            new ApiError(
              'rate_limited',
              `rate limit exceeded for ${head.c.action} (${head.c.maxRequests} per ${head.c.windowMs} ms per ${head.c.mode}); retry after ${retry} s`,
              { 'Retry-After': String(retry) },
            ),
          );
        },
        () => this.onStoreError(counters[0]?.action ?? 'push', req, next),
      );
    };
  }

  private onStoreError(action: RateAction, req: Request, next: NextFunction): void {
    const open = this.failOpen(action);
    this.o.observer?.storeFailed?.(action, open ? 'open' : 'closed');
    if (open) return next();
    if (req.method === 'POST') req.resume();
    next(
      new ApiError('unavailable', 'rate limiter unavailable (Redis unreachable); retry later', { 'Retry-After': '1' }),
    );
  }

  /**
   * The per-app push budget: `events` more events for the list prefix `prefix` of `collection`
   * within the window. Answers null when admitted (or when the store is down and push fails
   * open), else the refusal: `rate_limited` (its `RateLimit-*` headers set on `res`) or
   * `unavailable` (store down, push fails closed).
   */
  async admitEvents(
    collection: string,
    prefix: string,
    limit: { windowMs: number; maxEvents: number },
    events: number,
    res: Response,
  ): Promise<AppEventsRefusal | null> {
    if (events <= 0) return null;
    const key = appBudgetKey(this.o.keyPrefix, collection, digest(prefix));
    let r;
    try {
      r = await withTimeout(
        this.o.store.admitEvents(key, limit.windowMs, limit.maxEvents, events),
        this.o.timeoutMs ?? 1000,
        'app events check',
      );
    } catch {
      const open = this.failOpen('push');
      this.o.observer?.storeFailed?.('push', open ? 'open' : 'closed');
      if (open) return null;
      return {
        code: 'unavailable',
        detail: 'rate limiter unavailable (Redis unreachable); retry later',
        retryAfter: 1,
      };
    }
    if (r.admitted) return null;
    this.o.observer?.limited?.('push', 'app_events');
    const retry = Math.max(1, Math.ceil(r.resetMs / 1000));
    setLimitHeaders(res, limit.maxEvents, limit.maxEvents - r.count, r.resetMs, limit.windowMs);
    return {
      code: 'rate_limited',
      detail: `this app is over its push budget of ${limit.maxEvents} events per ${limit.windowMs} ms; retry after ${retry} s`,
      retryAfter: retry,
    };
  }
}
