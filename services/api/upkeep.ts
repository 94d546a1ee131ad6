import type { Queue } from 'bullmq';
import { bestEffort } from '../../shared/best-effort.js';
import { reapOnce } from '../../shared/ledger/reaper.js';
import { type Logger, type ThrottledWarn, throttledWarn } from '../../shared/logger.js';
import { type RedisClient, redisAddress } from '../../shared/redis/connection.js';
import type { Shard, ShardSet } from '../../shared/ledger/shard-set.js';
import { withTimeout } from '../../shared/timeout.js';
import { type ApiMetrics, QUEUE_STATES, SHARD_QUEUE_STATES, type UpkeepStep } from './metrics.js';

export interface UpkeepDeps {
  shards: ShardSet;
  /** Shard 0's queue: every encoder runs one worker per shard, so its worker count is the encoder count. */
  queue: Queue;
  redis: RedisClient;
  metrics: ApiMetrics;
  logger: Logger;
  /** An id in flight this long with no job behind it is an orphan (ORPHAN_GRACE_SECONDS). */
  graceMs: number;
}

/** Upkeep passes run this often. */
const UPKEEP_INTERVAL_MS = 5000;

/**
 * The API's background upkeep: the reaper that releases ids that will never be written (minted by
 * an API that died before enqueueing, or dead-lettered with a lost release), so the list's
 * watermark moves on, and the queue gauges. One pass costs a bounded number of round trips per
 * shard, however many prefixes.
 */
export class Upkeep {
  private gaugesInFlight: Promise<void> | undefined;
  // Every failed pass is counted; the log says so at most every 30 s, with the count since.
  private readonly upkeepFailed: ThrottledWarn;
  private timer: NodeJS.Timeout | undefined;
  private busy = false;

  constructor(private readonly deps: UpkeepDeps) {
    this.upkeepFailed = throttledWarn(deps.logger, 'upkeep failed', 30_000);
  }

  /** Oldest in-flight id over every shard: one scan script per shard, however many prefixes. */
  async maxLagMs(): Promise<number> {
    const lags = await Promise.all(this.deps.shards.shards.map((s) => s.ledger.maxLagMs()));
    return Math.max(0, ...lags);
  }

  /** One Redis round per registry read however many gauges ask; a slow or absent Redis leaves the last values. */
  refreshGauges(): Promise<void> {
    const { redis, logger, metrics } = this.deps;
    // Redis known to be away: answer the scrape at once with the last values (the upkeep loop counts the outage).
    if (redis.status !== 'ready') return Promise.resolve();
    this.gaugesInFlight ??= bestEffort('queue_gauges', withTimeout(this.readQueueGauges(), 2000, 'queue gauges'), {
      logger,
      counter: metrics.bestEffortFailures,
    }).finally(() => (this.gaugesInFlight = undefined));
    return this.gaugesInFlight;
  }

  /** One pass: reap, then gauges. A failed step is logged (throttled) and counted, and the pass rejects. */
  async runOnce(): Promise<void> {
    const { shards, metrics, logger, graceMs } = this.deps;
    await this.step('reap', async () => {
      const reaped = { orphans: 0, dead: 0 };
      await withTimeout(
        Promise.all(
          shards.shards.map(async (s) => {
            const r = await reapOnce(s.ledger, s.queue, graceMs);
            reaped.orphans += r.orphans;
            reaped.dead += r.dead;
          }),
        ),
        10_000,
        'reaper',
      );
      if (reaped.orphans) metrics.orphansReaped.inc({ kind: 'orphan' }, reaped.orphans);
      if (reaped.dead) metrics.orphansReaped.inc({ kind: 'dead' }, reaped.dead);
      if (reaped.orphans || reaped.dead) logger.warn(reaped, 'released stuck in-flight batch ids');
    });
    await this.step('gauges', () => withTimeout(this.readQueueGauges(), 5000, 'queue gauges'));
  }

  /** Runs a pass every few seconds (never two at once). Idempotent. */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      if (this.busy) return;
      this.busy = true;
      // Swallowed: a failed pass was logged and counted in step(); the next pass runs in 5 s.
      this.runOnce()
        .catch(() => undefined)
        .finally(() => (this.busy = false));
    }, UPKEEP_INTERVAL_MS);
    this.timer.unref();
  }

  /** Stops the loop. Idempotent. */
  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private async step(step: UpkeepStep, fn: () => Promise<void>): Promise<void> {
    const { metrics, redis } = this.deps;
    try {
      await fn();
    } catch (err) {
      metrics.upkeepFailures.inc({ step });
      // Driver and ledger messages name keys and ids at most, never event contents.
      this.upkeepFailed({
        step,
        err: err instanceof Error ? `${err.name}: ${err.message.slice(0, 200)}` : 'unknown',
        redis: redisAddress(redis),
        redisStatus: redis.status,
      });
      throw err;
    }
  }

  private async shardGauges(s: Shard): Promise<{ counts: Record<string, number>; oldestWaiting: number | null }> {
    const [counts, [oldest]] = await Promise.all([
      s.queue.getJobCounts(...QUEUE_STATES),
      s.queue.getJobs(['waiting'], 0, 0, true),
    ]);
    return { counts, oldestWaiting: oldest ? oldest.timestamp : null };
  }

  private async readQueueGauges(): Promise<void> {
    const { shards, queue, metrics } = this.deps;
    const [perShard, lagMs, workers] = await Promise.all([
      Promise.all(shards.shards.map((s) => this.shardGauges(s))),
      this.maxLagMs(),
      // Every encoder runs one worker per shard: shard 0's count is the encoder count.
      // CLIENT LIST may be disabled on a managed Redis: then the gauge keeps its last value.
      queue.getWorkersCount().catch(() => null),
    ]);
    const totals: Record<string, number> = {};
    let oldest: number | null = null;
    perShard.forEach((g, i) => {
      for (const [state, n] of Object.entries(g.counts)) totals[state] = (totals[state] ?? 0) + n;
      for (const state of SHARD_QUEUE_STATES)
        metrics.queueShardJobs.set({ shard: String(i), state }, g.counts[state] ?? 0);
      if (g.oldestWaiting !== null && (oldest === null || g.oldestWaiting < oldest)) oldest = g.oldestWaiting;
    });
    for (const [state, n] of Object.entries(totals)) metrics.queueJobs.set({ state }, n);
    metrics.queueOldestWaiting.set(oldest !== null ? Math.max(0, (Date.now() - oldest) / 1000) : 0);
    metrics.watermarkLag.set(lagMs / 1000);
    if (workers !== null) metrics.queueWorkers.set(workers);
  }
}
