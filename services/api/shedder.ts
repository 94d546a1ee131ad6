import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';

export interface ShedderOptions {
  queue: Queue;
  redis: Redis;
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
      if (projected >= this.opts.maxMemoryRatio) return `Redis memory at ${(projected * 100).toFixed(0)}% of maxmemory (with this process's writes since the last sample)`;
    }
    return null;
  }

  async sample(): Promise<void> {
    if (this.running) return;
    this.running = true;
    // Writes noted before INFO is asked are in its used_memory; later ones stay pending.
    const counted = this.pending;
    try {
      const [counts, info] = await Promise.all([this.opts.queue.getJobCounts('waiting', 'prioritized', 'delayed'), this.opts.redis.info('memory')]);
      const waiting = (counts.waiting ?? 0) + (counts.prioritized ?? 0) + (counts.delayed ?? 0);
      const max = infoField(info, 'maxmemory');
      const used = infoField(info, 'used_memory');
      const ratio = max > 0 ? used / max : 0;
      this.used = used;
      this.max = max;
      this.pending = Math.max(0, this.pending - counted);
      this.opts.onSample?.({ waiting, memoryRatio: ratio });
      if (waiting >= this.opts.maxWaiting) this.reason = `queue backlog of ${waiting} batches is over the high-water mark`;
      else if (ratio >= this.opts.maxMemoryRatio) this.reason = `Redis memory at ${(ratio * 100).toFixed(0)}% of maxmemory`;
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
