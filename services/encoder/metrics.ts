import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { FAST_BUCKETS, METRIC_PREFIX as P, SLOW_BUCKETS } from '../../shared/metrics.js';
import { REPLICA_OUTCOMES } from './replication.js';
import { bestEffortCounter } from '../../shared/best-effort.js';

/** Metrics of the encoder service (one set per registry). Labels are fixed small sets: never an app or batch id. */
export function createEncoderMetrics(registry: Registry) {
  const registers = [registry];
  const m = {
    batches: new Counter({
      name: `${P}encoder_batches_total`,
      help: 'Batch jobs by outcome (written, retried, failed)',
      labelNames: ['outcome'],
      registers,
    }),
    eventsWritten: new Counter({
      name: `${P}encoder_events_written_total`,
      help: 'Events written to Parquet files',
      registers,
    }),
    inputBytes: new Counter({
      name: `${P}encoder_input_bytes_total`,
      help: 'JSON body bytes of written batches',
      registers,
    }),
    parquetBytes: new Counter({
      name: `${P}encoder_parquet_bytes_total`,
      help: 'Parquet bytes written to the store',
      registers,
    }),
    storeErrors: new Counter({
      name: `${P}encoder_store_errors_total`,
      help: 'Failed store writes',
      labelNames: ['retriable'],
      registers,
    }),
    waitSeconds: new Histogram({
      name: `${P}encoder_wait_seconds`,
      help: 'Time a job waited in the queue before an encoder took it',
      buckets: SLOW_BUCKETS,
      registers,
    }),
    encodeSeconds: new Histogram({
      name: `${P}encoder_encode_duration_seconds`,
      help: 'JSON -> Arrow -> Parquet time per batch',
      buckets: SLOW_BUCKETS,
      registers,
    }),
    writeSeconds: new Histogram({
      name: `${P}encoder_write_duration_seconds`,
      help: 'Store write time per batch',
      buckets: SLOW_BUCKETS,
      registers,
    }),
    endToEndSeconds: new Histogram({
      name: `${P}encoder_end_to_end_seconds`,
      help: 'From received_at (id instant) to the file being durable',
      buckets: SLOW_BUCKETS,
      registers,
    }),
    compressionRatio: new Histogram({
      name: `${P}encoder_compression_ratio`,
      help: 'JSON bytes / Parquet bytes per batch',
      buckets: [0.5, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30],
      registers,
    }),
    concurrency: new Gauge({
      name: `${P}encoder_concurrency`,
      help: 'Configured job concurrency of this encoder process',
      registers,
    }),
    inflightBytes: new Gauge({
      name: `${P}encoder_inflight_bytes`,
      help: 'Memory cost of the jobs this encoder process works on now: decoded JSON bytes plus a per-event row cost, or the Parquet file bytes (counted against ENCODER_MAX_INFLIGHT_BYTES)',
      registers,
    }),
    inflightBytesLimit: new Gauge({
      name: `${P}encoder_inflight_bytes_limit`,
      help: 'ENCODER_MAX_INFLIGHT_BYTES of this process (0: no byte bound)',
      registers,
    }),
    budgetWaitSeconds: new Histogram({
      name: `${P}encoder_budget_wait_seconds`,
      help: 'Time a taken job waited for ENCODER_MAX_INFLIGHT_BYTES before it was unpacked',
      buckets: SLOW_BUCKETS,
      registers,
    }),
    payloadReloads: new Counter({
      name: `${P}encoder_payload_reloads_total`,
      help: 'Jobs that let go of their payload while they waited for ENCODER_MAX_INFLIGHT_BYTES and read it from Redis again once admitted',
      registers,
    }),
    active: new Gauge({
      name: `${P}encoder_active_jobs`,
      help: 'Jobs being processed by this encoder process now',
      registers,
    }),
    // Summed over instances this is the number of live encoders; `up` alone cannot tell a
    // process that still answers scrapes but has stopped taking jobs (shutting down).
    /** `dead_letter_release`: a dead-lettered batch's id left in flight (the API's reaper frees it). */
    bestEffortFailures: bestEffortCounter(registry, ['dead_letter_release']),
    replicaWaits: new Counter({
      name: `${P}encoder_replica_waits_total`,
      help: 'REDIS_WAIT_REPLICAS checks before a job is written, by outcome (replicated; timeout, lost, error: not written, delayed and taken again)',
      labelNames: ['outcome'],
      registers,
    }),
    replicaWaitSeconds: new Histogram({
      name: `${P}encoder_replica_wait_seconds`,
      help: 'Time of the REDIS_WAIT_REPLICAS check per job (lock renewal + WAIT + lock read, one round trip)',
      buckets: FAST_BUCKETS,
      registers,
    }),
    workers: new Gauge({
      name: `${P}encoder_workers`,
      help: 'BullMQ workers taking jobs in this encoder process (1 while running, 0 once closing)',
      registers,
    }),
  };
  for (const o of ['written', 'retried', 'failed']) m.batches.inc({ outcome: o }, 0);
  m.storeErrors.inc({ retriable: 'true' }, 0);
  m.storeErrors.inc({ retriable: 'false' }, 0);
  for (const o of REPLICA_OUTCOMES) m.replicaWaits.inc({ outcome: o }, 0);
  return m;
}
export type EncoderMetrics = ReturnType<typeof createEncoderMetrics>;
