/**
 * The Segment door as the API app mounts it (`SEGMENT_WRITE_KEYS_FILE` set): the write keys read
 * and checked at start, a rate limiter over the same counters as the sync routes (same store,
 * prefix and keys, so a collection's push rules and an app's events budget count both doors).
 */
import type { Router } from 'express';
import type { ByteBudget } from '../../../shared/byte-budget.js';
import {
  RATE_LIMIT_PUSH_ON_ERROR_DEFAULT,
  type SyncConfig,
  TRUSTED_PROXY_HOPS_DEFAULT,
} from '../../../shared/config.js';
import { rateLimitKeyPrefix } from '../../../shared/redis/keyspace.js';
import { MemoryCounterStore, RedisCounterStore } from '../edge/counters.js';
import { RateLimiter, resolveCounters } from '../edge/rate-limit.js';
import type { EventsServerPlugin } from '../plugin.js';
import type { RouterObserver, SyncRouterOptions } from '../router.js';
import { createSegmentRouter } from './router.js';
import { loadWriteKeys } from './write-keys.js';

export interface SegmentDoorOptions {
  /** SEGMENT_WRITE_KEYS_FILE. */
  file: string;
  config: SyncConfig;
  plugins: readonly EventsServerPlugin[];
  /** The edge's router options (CORS, the rate-limit store and its settings). */
  edge: Partial<SyncRouterOptions>;
  appPattern?: RegExp;
  shedReason?: () => string | null;
  inflightBudget?: ByteBudget;
  observer?: RouterObserver;
}

/** The `/v1/*` router; throws ConfigError (at start) for a bad write keys file. */
export function createSegmentDoor(o: SegmentDoorOptions): Router {
  const writeKeys = loadWriteKeys(o.file, o.config.collections, o.appPattern);
  return createSegmentRouter({
    writeKeys,
    config: o.config,
    plugins: o.plugins,
    limiter: limiterOf(o),
    cors: o.edge.cors === true ? {} : o.edge.cors || undefined,
    shedReason: o.shedReason,
    inflightBudget: o.inflightBudget,
    observer: o.observer,
    requestTimeoutMs: o.edge.requestTimeoutMs,
  });
}

function limiterOf(o: SegmentDoorOptions): RateLimiter | null {
  const limited = o.config.collections.some(
    (c) => c.rateLimit?.appEvents || resolveCounters(c, o.config.rateLimit).push.length > 0,
  );
  if (!limited) return null;
  const store = o.edge.rateLimitStore;
  const observer = o.observer;
  return new RateLimiter({
    store: store === undefined ? new MemoryCounterStore() : 'hit' in store ? store : new RedisCounterStore(store),
    keyPrefix: o.edge.rateLimitKeyPrefix ?? rateLimitKeyPrefix(),
    trustedProxyHops: o.edge.trustedProxyHops ?? TRUSTED_PROXY_HOPS_DEFAULT,
    pushOnError: o.edge.rateLimitPushOnError ?? RATE_LIMIT_PUSH_ON_ERROR_DEFAULT,
    observer: {
      limited: observer?.rateLimited,
      storeFailed: observer?.rateLimitStoreFailed,
      checkSeconds: observer?.rateLimitCheckSeconds,
    },
  });
}
