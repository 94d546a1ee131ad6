import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { FAST_BUCKETS, METRIC_PREFIX as P } from '../../shared/metrics.js';
import { bestEffortCounter } from '../../shared/best-effort.js';

/** Reasons a push is refused; a fixed set so the label stays small. */
export const REJECT_REASONS = [
  'content_type',
  'content_encoding',
  'too_large',
  'bad_encoding',
  'bad_json',
  'bad_envelope',
  'bad_param',
  'bad_header',
  'unauthorized',
  'forbidden',
  'idempotency_conflict',
] as const;
export type RejectReason = (typeof REJECT_REASONS)[number];

/** Why a push was shed (503 + Retry-After): the queue or Redis memory over its mark, or the body budget spent. */
export const SHED_REASONS = ['high_water', 'inflight_bytes'] as const;
export type ShedReason = (typeof SHED_REASONS)[number];

/** Outcomes of a push request; every one is exported from the start so rates never lack a series. */
export const PUSH_OUTCOMES = ['accepted', 'empty', 'deduplicated', 'rejected', 'shed', 'unavailable'] as const;

/** Steps of the API's upkeep pass (every 5 s); a failed pass counts once, under the step that failed. */
export const UPKEEP_STEPS = ['reap', 'gauges'] as const;
export type UpkeepStep = (typeof UPKEEP_STEPS)[number];

/** Best-effort work of the API (`ingest_best_effort_failures_total{what}`): a dead letter's release or old job after a replay, the queue gauges read on a scrape. */
export const API_BEST_EFFORT = ['replay_release', 'replay_remove_old_job', 'queue_gauges', 'push_release'] as const;

/** States exported per shard by `ingest_queue_shard_jobs`. */
export const SHARD_QUEUE_STATES = ['waiting', 'active', 'failed'] as const;

/** Queue states exported by `ingest_queue_jobs` (the dashboard and alerts name these). */
export const QUEUE_STATES = ['waiting', 'active', 'delayed', 'failed', 'prioritized', 'completed'] as const;

export interface ApiMetricsOptions {
  /**
   * Refreshes the queue gauges from Redis. Called whenever the registry is read (a scrape),
   * so queue depth is as fresh as the scrape, not as old as the last upkeep pass. It must
   * bound its own time and never throw: a slow Redis must not hang /metrics.
   */
  refreshQueueGauges?: () => Promise<void>;
}

/** Metrics of the API service (one set per registry). Labels are fixed small sets: never an app or batch id. */
export function createApiMetrics(registry: Registry, opts: ApiMetricsOptions = {}) {
  const registers = [registry];
  const refresh = opts.refreshQueueGauges;
  // Every queue gauge awaits the same refresh: prom-client reads metrics concurrently, and a
  // gauge without its own collect would be read before the refresh finished.
  const collect = refresh ? () => refresh() : undefined;
  const m = {
    pushes: new Counter({
      name: `${P}pushes_total`,
      help: 'Push requests by outcome (accepted, empty, deduplicated, rejected, shed, unavailable)',
      labelNames: ['outcome'],
      registers,
    }),
    shed: new Counter({
      name: `${P}push_shed_total`,
      help: 'Pushes answered 503 + Retry-After under load, by reason (high_water: queue or Redis memory; inflight_bytes: MAX_INFLIGHT_BYTES)',
      labelNames: ['reason'],
      registers,
    }),
    inflightBytes: new Gauge({
      name: `${P}push_inflight_bytes`,
      help: 'Memory of the pushes this process holds now: body bytes, plus a per-event row cost once counted (against MAX_INFLIGHT_BYTES)',
      registers,
    }),
    inflightBytesLimit: new Gauge({
      name: `${P}push_inflight_bytes_limit`,
      help: 'MAX_INFLIGHT_BYTES of this process',
      registers,
    }),
    rejections: new Counter({
      name: `${P}push_rejections_total`,
      help: 'Refused pushes by reason',
      labelNames: ['reason'],
      registers,
    }),
    eventsAccepted: new Counter({ name: `${P}events_accepted_total`, help: 'Events in accepted batches', registers }),
    bytesAccepted: new Counter({
      name: `${P}bytes_accepted_total`,
      help: 'Request body bytes of accepted batches, as sent (compressed for a compressed push)',
      registers,
    }),
    httpDuration: new Histogram({
      name: `${P}http_request_duration_seconds`,
      help: 'HTTP request duration by route and status',
      labelNames: ['route', 'method', 'status'],
      buckets: FAST_BUCKETS,
      registers,
    }),
    mintDuration: new Histogram({
      name: `${P}mint_duration_seconds`,
      help: 'Time to mint a batch id in Redis',
      buckets: FAST_BUCKETS,
      registers,
    }),
    pushStepDuration: new Histogram({
      name: `${P}push_step_duration_seconds`,
      help: 'Time each step of a push took, by step: admission (shed, params, headers, read-body, envelope, app-budget), then the queued path (claim-id, build-payload, enqueue, durability-wait); a step that ended the push (a refusal, an error answer) counts too',
      labelNames: ['step'],
      buckets: FAST_BUCKETS,
      registers,
    }),
    enqueueDuration: new Histogram({
      name: `${P}enqueue_duration_seconds`,
      help: 'Time to add a batch job to the queue',
      buckets: FAST_BUCKETS,
      registers,
    }),
    encodeDuration: new Histogram({
      name: `${P}push_encode_duration_seconds`,
      help: 'Time the API spent turning a push body into its Parquet file (bodies from 128 KiB up to API_ENCODE_MAX_BYTES, on its encode thread, the wait for it included; the encoder only writes those)',
      buckets: FAST_BUCKETS,
      registers,
    }),
    encodeFailures: new Counter({
      name: `${P}push_encode_failures_total`,
      help: 'Pushes whose Parquet encode in the API failed (its thread died, was closed or did not answer within 3 s): the batch was queued as JSON and an encoder encodes it',
      registers,
    }),
    enqueueGroupBatches: new Histogram({
      name: `${P}enqueue_group_batches`,
      help: 'Batches per group job this process added (QUEUE_GROUP_MAX; pushes that went alone are not counted)',
      buckets: [2, 4, 8, 16, 32, 64],
      registers,
    }),
    enqueueUnknown: new Counter({
      name: `${P}enqueue_unknown_total`,
      help: 'Pushes answered 503 whose add was sent but did not answer in time: it may still land, so the id stays in flight and the key claimed',
      registers,
    }),
    queueJobs: new Gauge({
      name: `${P}queue_jobs`,
      help: 'Jobs in the queue by state',
      labelNames: ['state'],
      registers,
      collect,
    }),
    queueShardJobs: new Gauge({
      name: `${P}queue_shard_jobs`,
      help: 'Jobs waiting, active or dead-lettered per queue shard (QUEUE_SHARDS): a hot shard shows here; ingest_queue_jobs is their sum',
      labelNames: ['shard', 'state'],
      registers,
      collect,
    }),
    queueOldestWaiting: new Gauge({
      name: `${P}queue_oldest_waiting_age_seconds`,
      help: 'Age of the oldest waiting job (0 when none)',
      registers,
      collect,
    }),
    queueWorkers: new Gauge({
      name: `${P}queue_workers`,
      help: 'BullMQ workers (encoder connections) attached to the queue, as Redis sees them',
      registers,
      collect,
    }),
    watermarkLag: new Gauge({
      name: `${P}watermark_lag_seconds`,
      help: 'Age of the oldest in-flight batch over all list prefixes: newer batches are hidden from list until it is written',
      registers,
      collect,
    }),
    upkeepFailures: new Counter({
      name: `${P}upkeep_failures_total`,
      help: 'Failed passes of the API upkeep loop (orphan reaping, queue gauges), by step; the log says why',
      labelNames: ['step'],
      registers,
    }),
    orphansReaped: new Counter({
      name: `${P}orphans_reaped_total`,
      help: 'In-flight ids released by the reaper (minted but never enqueued, or dead-lettered)',
      labelNames: ['kind'],
      registers,
    }),
    bestEffortFailures: bestEffortCounter(registry, API_BEST_EFFORT),
    redisUsedMemoryRatio: new Gauge({
      name: `${P}redis_memory_used_ratio`,
      help: 'Redis used_memory / maxmemory as last sampled by the load shedder (0 when maxmemory is unset)',
      registers,
    }),
  };
  for (const o of PUSH_OUTCOMES) m.pushes.inc({ outcome: o }, 0);
  for (const r of REJECT_REASONS) m.rejections.inc({ reason: r }, 0);
  for (const r of SHED_REASONS) m.shed.inc({ reason: r }, 0);
  for (const s of QUEUE_STATES) m.queueJobs.set({ state: s }, 0);
  for (const k of ['orphan', 'dead']) m.orphansReaped.inc({ kind: k }, 0);
  for (const step of UPKEEP_STEPS) m.upkeepFailures.inc({ step }, 0);
  return m;
}
export type ApiMetrics = ReturnType<typeof createApiMetrics>;

/** Outcomes of a cap-cert check (CAP_AUTH=on); mirrors CAP_OUTCOMES in edge/cap-auth.ts, which cannot be imported here without loading it. */
const CAP_AUTH_OUTCOMES = [
  'ok',
  'too_large',
  'malformed',
  'bad_headers',
  'skew',
  'invalid_cap',
  'expired',
  'kind',
  'method',
  'bad_signature',
  'revoked',
  'replay',
  'store_unavailable',
] as const;

/** Metrics of cap-cert auth: outcomes by reason and verification time. Never an identity or a cert in a label. */
export function createCapAuthMetrics(registry: Registry) {
  const registers = [registry];
  const m = {
    outcomes: new Counter({
      name: `${P}cap_auth_total`,
      help: 'Requests with an Authorization: Cap credential, by outcome (ok, or why it was refused: replay, expired, bad_signature, ...)',
      labelNames: ['outcome'],
      registers,
    }),
    verify: new Histogram({
      name: `${P}cap_auth_duration_seconds`,
      help: 'Time to check one cap-signed request: cert and request signatures (Ed25519) and the nonce claim (one Redis round trip)',
      buckets: FAST_BUCKETS,
      registers,
    }),
  };
  for (const o of CAP_AUTH_OUTCOMES) m.outcomes.inc({ outcome: o }, 0);
  return m;
}

/**
 * `stepSeconds` for the push's observers: each step's sample goes to its labelled child of
 * `ingest_push_step_duration_seconds`, made once per step name. The names are the steps' own, a
 * fixed set of ten. Cost: about 0.4 µs an observation on the bench machine, 4–5 µs a push with
 * the clock reads (StepRunner.run).
 */
export function pushStepTimer(histogram: Histogram<'step'>): (step: string, seconds: number) => void {
  const children = new Map<string, Histogram.Internal<'step'>>();
  return (step, seconds) => {
    let child = children.get(step);
    if (child === undefined) {
      child = histogram.labels({ step });
      children.set(step, child);
    }
    child.observe(seconds);
  };
}
