import type { RedisClient } from '../../../shared/redis/connection.js';
import { type ScriptedRedis, withScripts } from '../../../shared/redis/scripts.js';

/** One counted request: the bucket's count after it and how long its window still runs. */
export interface Hit {
  count: number;
  resetMs: number;
}

/** One push's events against its app's budget. */
export interface EventsHit extends Hit {
  admitted: boolean;
}

/**
 * Where rate-limit counters live. Redis (shared by every API instance) in the service; an
 * in-process map for the library when no Redis is given (limits then hold per process only).
 */
export interface CounterStore {
  hit(key: string, windowMs: number): Promise<Hit>;
  admitEvents(key: string, windowMs: number, maxEvents: number, events: number): Promise<EventsHit>;
}

/**
 * Fixed-window counters in Redis, one Lua script call (one round trip) per counter. Key family
 * `<prefix>:…`: one key per active bucket, expiring with its window (PEXPIRE), ~100 bytes each.
 */
export class RedisCounterStore implements CounterStore {
  private readonly redis: ScriptedRedis;

  constructor(redis: RedisClient) {
    this.redis = withScripts(redis);
  }

  async hit(key: string, windowMs: number): Promise<Hit> {
    const [count, resetMs] = await this.redis.ingestRateCheck(key, String(windowMs));
    return { count, resetMs };
  }

  async admitEvents(key: string, windowMs: number, maxEvents: number, events: number): Promise<EventsHit> {
    const [ok, count, resetMs] = await this.redis.ingestAppEvents(
      key,
      String(windowMs),
      String(maxEvents),
      String(events),
    );
    return { admitted: ok === 1, count, resetMs };
  }
}

/**
 * The same counters in this process only (library use without Redis). At most `maxKeys`
 * buckets: expired ones are swept first, then the oldest are dropped.
 */
export class MemoryCounterStore implements CounterStore {
  private readonly buckets = new Map<string, { count: number; endsAt: number }>();

  constructor(private readonly maxKeys = 10_000) {}

  private bucket(key: string, windowMs: number, now: number): { count: number; endsAt: number } {
    let b = this.buckets.get(key);
    if (!b || b.endsAt <= now) {
      this.buckets.delete(key);
      if (this.buckets.size >= this.maxKeys) this.sweep(now);
      b = { count: 0, endsAt: now + windowMs };
      this.buckets.set(key, b);
    }
    return b;
  }

  private sweep(now: number): void {
    for (const [k, v] of this.buckets) if (v.endsAt <= now) this.buckets.delete(k);
    // Map order is insertion order: drop the oldest windows until there is room.
    for (const k of this.buckets.keys()) {
      if (this.buckets.size < this.maxKeys) break;
      this.buckets.delete(k);
    }
  }

  async hit(key: string, windowMs: number): Promise<Hit> {
    const now = Date.now();
    const b = this.bucket(key, windowMs, now);
    b.count += 1;
    return { count: b.count, resetMs: b.endsAt - now };
  }

  async admitEvents(key: string, windowMs: number, maxEvents: number, events: number): Promise<EventsHit> {
    const now = Date.now();
    const b = this.bucket(key, windowMs, now);
    if (b.count > 0 && b.count + events > maxEvents)
      return { admitted: false, count: b.count, resetMs: b.endsAt - now };
    b.count += events;
    return { admitted: true, count: b.count, resetMs: b.endsAt - now };
  }
}
