/**
 * The planner: which periods of which list prefixes are due, each queued as one rollup job per
 * (prefix, period) for roll-job.ts; and re-rolls of rolled periods a replayed batch landed in.
 * A pass also runs retention on every prefix it knows (`retain`, retention.ts).
 */
import type { Queue } from 'bullmq';
import { batchIdMs } from '../../shared/ids.js';
import type { StoragePathTemplate } from '../../shared/paths.js';
import { periodStart } from '../../shared/rollup/layout.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import { finalHorizon, planPrefix } from './plan.js';
import { discoverPrefixes, prefixOfKey } from '../../shared/rollup/prefixes.js';
import { ROLLUP_JOB_NAME, ROLLUP_JOB_OPTIONS, type RollupJob, rollupJobId } from '../../shared/redis/jobs/rollup.js';
import { forgetReplayedBatch, replayedBatches } from '../../shared/redis/rollup-keys.js';
import { type RollupDeps, assertLayout, ledgerOf } from './context.js';

/** Replay notes handled per planning pass (per shard). */
const REPLAY_NOTES_PER_PASS = 100;

/**
 * How often the store is skip-scanned for prefixes (one listing call per prefix): once a period,
 * between 5 s and 5 min. The ledger's in-flight prefixes are read every pass besides.
 */
export function discoveryIntervalMs(periodSeconds: number): number {
  return Math.min(300_000, Math.max(5000, periodSeconds * 1000));
}

/** Planning interval: a tenth of the period, between 1 s and 30 s. */
export function planIntervalMs(periodSeconds: number): number {
  return Math.min(30_000, Math.max(1000, periodSeconds * 100));
}

/** True when a pass at `nowMs` skip-scans the store for prefixes (the last scan ran at `lastMs`, 0 for never). */
export function discoveryDue(nowMs: number, lastMs: number, periodSeconds: number): boolean {
  return nowMs - lastMs >= discoveryIntervalMs(periodSeconds);
}

/** True when every batch id of the period starting at `startMs` is final (`horizonMs`, from finalHorizon). */
export function periodFinal(horizonMs: number, startMs: number, periodMs: number): boolean {
  return horizonMs >= startMs + periodMs;
}

/**
 * The period a replayed batch (its id's instant `batchMs`) asks to re-roll, or null when its
 * period is not rolled yet (at or past the manifest's watermark, or no manifest): the forward
 * roll takes the batch.
 */
export function rerollStartMs(batchMs: number, watermarkMs: number | undefined, periodMs: number): number | null {
  if (watermarkMs === undefined || batchMs >= watermarkMs) return null;
  return periodStart(batchMs, periodMs);
}

/** A collection's storage path, whose list prefixes the planner rolls. */
export interface CollectionTemplate {
  name: string;
  template: StoragePathTemplate;
}

export interface PlannerOptions {
  templates: readonly CollectionTemplate[];
  /** The rollup queue the planner adds jobs to. */
  queue: Queue;
  /** Retention of one prefix, run after its planning in every pass; it may throw (counted, logged). */
  retain: (prefix: string, nowMs: number) => Promise<void>;
}

/** Plans every known prefix each pass; one instance per rollup process. */
export class RollupPlanner {
  /** Every prefix seen (store scans, ledgers' in-flight prefixes), with when it was last seen. */
  private readonly known = new Map<string, number>();
  private lastDiscovery = 0;

  constructor(
    private readonly deps: RollupDeps,
    private readonly o: PlannerOptions,
  ) {}

  /** Every list prefix seen so far (the Iceberg committer's tables). */
  knownPrefixes(): string[] {
    return [...this.known.keys()].sort();
  }

  /** One pass: discovery, then planning and retention of every known prefix, then replay notes. */
  async pass(): Promise<void> {
    await assertLayout(this.deps);
    const now = Date.now();
    await this.discover(now);
    let lag = 0;
    for (const prefix of this.known.keys()) lag = Math.max(lag, await this.planAndRetain(prefix, now));
    this.deps.metrics.lagSeconds.set(lag);
    this.deps.metrics.prefixes.set(this.known.size);
    await this.handleReplays();
  }

  /** Queues the prefix's next period when it is due; returns the prefix's lag in seconds. */
  async planOne(prefix: string): Promise<number> {
    const { deps } = this;
    const c = this.collectionOf(prefix);
    if (!c) return 0;
    const manifest = await readManifest(deps.store, prefix);
    const plan = await planPrefix(
      {
        store: deps.store,
        ledger: ledgerOf(deps, prefix),
        periodSeconds: deps.env.ROLLUP_PERIOD_SECONDS,
        delaySeconds: deps.env.ROLLUP_DELAY_SECONDS,
      },
      prefix,
      manifest,
    );
    if (plan.due && plan.nextStartMs !== undefined)
      await this.addJob({ v: 1, collection: c.name, prefix, startMs: plan.nextStartMs, kind: 'roll' });
    return plan.lagSeconds;
  }

  private async discover(now: number): Promise<void> {
    const { deps } = this;
    if (discoveryDue(now, this.lastDiscovery, deps.env.ROLLUP_PERIOD_SECONDS)) {
      this.lastDiscovery = now;
      for (const t of this.o.templates) {
        for (const root of ['batches', 'rollups'] as const) {
          for (const p of await discoverPrefixes(deps.store, t.template, { root })) this.known.set(p, now);
        }
      }
    }
    for (const shardLedger of deps.ledgers)
      for (const p of await shardLedger.prefixes()) if (this.collectionOf(p)) this.known.set(p, now);
  }

  /** Plans and retains one prefix; a failure of either is counted and logged, and the pass goes on. Returns the lag (0 on failure). */
  private async planAndRetain(prefix: string, now: number): Promise<number> {
    const { metrics, logger } = this.deps;
    let lag = 0;
    try {
      lag = await this.planOne(prefix);
    } catch (err) {
      metrics.failures.inc({ stage: 'plan' });
      logger.warn({ prefix, err: (err as Error).message }, 'rollup planning failed for a prefix');
    }
    try {
      await this.o.retain(prefix, now);
    } catch (err) {
      metrics.failures.inc({ stage: 'retention' });
      logger.warn({ prefix, err: (err as Error).message }, 'rollup retention failed for a prefix');
    }
    return lag;
  }

  /** Replay notes are written beside the replayed batch's shard (see noteReplayedBatch): one set per shard. */
  private async handleReplays(): Promise<void> {
    for (const shardLedger of this.deps.ledgers) {
      for (const note of await replayedBatches(this.deps.cmd, shardLedger.namespace, REPLAY_NOTES_PER_PASS))
        await this.handleReplay(shardLedger.namespace, note);
    }
  }

  /** Queues the re-roll a replay note asks for once its batch is final, and forgets the note; keeps it while the batch is in flight. */
  private async handleReplay(ns: string, note: { member: string; prefix: string; batchId: string }): Promise<void> {
    const { deps } = this;
    const periodMs = deps.env.ROLLUP_PERIOD_SECONDS * 1000;
    const c = this.collectionOf(note.prefix);
    const manifest = c ? await readManifest(deps.store, note.prefix) : null;
    const startMs = c ? rerollStartMs(batchIdMs(note.batchId), manifest?.watermarkMs, periodMs) : null;
    if (!c || startMs === null) {
      await forgetReplayedBatch(deps.cmd, ns, note.member);
      return;
    }
    const { horizonMs } = await finalHorizon(ledgerOf(deps, note.prefix), note.prefix);
    if (!periodFinal(horizonMs, startMs, periodMs)) return; // the replayed batch is still in flight
    await this.addJob({ v: 1, collection: c.name, prefix: note.prefix, startMs, kind: 'reroll' }, note.batchId);
    await forgetReplayedBatch(deps.cmd, ns, note.member);
  }

  private collectionOf(prefix: string): CollectionTemplate | undefined {
    return this.o.templates.find((t) => prefixOfKey(t.template, `${prefix}x`)?.prefix === prefix);
  }

  private async addJob(job: RollupJob, replayedId?: string): Promise<void> {
    await this.o.queue.add(ROLLUP_JOB_NAME, job, { ...ROLLUP_JOB_OPTIONS, jobId: rollupJobId(job, replayedId) });
  }
}
