import type { Queue } from 'bullmq';
import { Cluster } from 'ioredis';
import type { RedisClient } from '../../shared/redis/connection.js';

export interface ShedderOptions {
  /** The queue, or every shard's queue (QUEUE_SHARDS): the backlog is their sum. */
  queue: Queue | readonly Queue[];
  redis: RedisClient;
  /** Shed when this many jobs wait. */
  maxWaiting: number;
  /** Shed when used_memory / maxmemory passes this (only when Redis has a maxmemory). */
  maxMemoryRatio: number;
  intervalMs?: number;
  onSample?(s: { waiting: number; memoryRatio: number }): void;
}

function infoField(info: string, field: string): number {
  const m = new RegExp(`^${field}:(\\d+)`, 'm').exec(info);
  return m ? Number(m[1]) : 0;
}

/**
 * Load shedding from a background sample (so a push costs no extra Redis round trip): once the
 * backlog or Redis memory passes its mark, pushes get 503 + Retry-After before Redis, which runs
 * with `noeviction`, would refuse writes with OOM.
 */
export class LoadShedder {
  private reason: string | null = null;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  /** Bytes this process wrote to Redis since the sample in `used` was asked for. */
  private pending = 0;
  private used = 0;
  private max = 0;

  constructor(private readonly opts: ShedderOptions) {}

  /**
   * Counts bytes this process just wrote to Redis. Between two samples they are added to the last
   * `used_memory`, so a burst cannot carry Redis past the mark (and into OOM) in one interval.
   */
  noteWrite(bytes: number): void {
    if (this.max > 0) this.pending += bytes;
  }

  /** Why pushes are being shed right now, or null. */
  shedReason(): string | null {
    if (this.reason !== null) return this.reason;
    if (this.max > 0 && this.pending > 0) {
      const projected = (this.used + this.pending) / this.max;
      if (projected >= this.opts.maxMemoryRatio)
        return `Redis memory at ${(projected * 100).toFixed(0)}% of maxmemory (with this process's writes since the last sample)`;
    }
    return null;
  }

  async sample(): Promise<void> {
    if (this.running) return;
    this.running = true;
    // Writes noted before INFO is asked are in its used_memory; later ones stay pending.
    const counted = this.pending;
    try {
      const queues: readonly Queue[] = Array.isArray(this.opts.queue) ? this.opts.queue : [this.opts.queue as Queue];
      const redis = this.opts.redis;
      // On a Cluster, the fullest master decides (every write of this process is counted against it).
      const infoOf =
        redis instanceof Cluster
          ? Promise.all(redis.nodes('master').map((n) => n.info('memory')))
          : redis.info('memory').then((i) => [i]);
      const [allCounts, infos] = await Promise.all([
        Promise.all(queues.map((q) => q.getJobCounts('waiting', 'prioritized', 'delayed'))),
        infoOf,
      ]);
      let waiting = 0;
      for (const counts of allCounts)
        waiting += (counts.waiting ?? 0) + (counts.prioritized ?? 0) + (counts.delayed ?? 0);
      let max = 0;
      let used = 0;
      let ratio = 0;
      for (const info of infos) {
        const m = infoField(info, 'maxmemory');
        const u = infoField(info, 'used_memory');
        const r = m > 0 ? u / m : 0;
        if (r >= ratio) [ratio, max, used] = [r, m, u];
      }
      this.used = used;
      this.max = max;
      this.pending = Math.max(0, this.pending - counted);
      this.opts.onSample?.({ waiting, memoryRatio: ratio });
      if (waiting >= this.opts.maxWaiting)
        this.reason = `queue backlog of ${waiting} batches is over the high-water mark`;
      else if (ratio >= this.opts.maxMemoryRatio)
        this.reason = `Redis memory at ${(ratio * 100).toFixed(0)}% of maxmemory`;
      else this.reason = null;
    } catch {
      // Redis unreachable: pushes fail on their own with 503; keep the last verdict.
    } finally {
      this.running = false;
    }
  }

  start(): void {
    if (this.timer) return;
    void this.sample();
    this.timer = setInterval(() => void this.sample(), this.opts.intervalMs ?? 250);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
