import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { FAST_BUCKETS, METRIC_PREFIX as P } from '../../shared/metrics.js';

/** Reasons a push is refused; a fixed set so the label stays small. */
export const REJECT_REASONS = ['content_type', 'too_large', 'bad_json', 'bad_envelope', 'bad_param', 'bad_header', 'unauthorized', 'forbidden'] as const;
export type RejectReason = (typeof REJECT_REASONS)[number];

/** Metrics of the API service (one set per registry). */
export function createApiMetrics(registry: Registry) {
  const registers = [registry];
  const m = {
    pushes: new Counter({ name: `${P}pushes_total`, help: 'Push requests by outcome (accepted, empty, deduplicated, rejected, shed, unavailable)', labelNames: ['outcome'], registers }),
    rejections: new Counter({ name: `${P}push_rejections_total`, help: 'Refused pushes by reason', labelNames: ['reason'], registers }),
    eventsAccepted: new Counter({ name: `${P}events_accepted_total`, help: 'Events in accepted batches', registers }),
    bytesAccepted: new Counter({ name: `${P}bytes_accepted_total`, help: 'Request body bytes of accepted batches', registers }),
    httpDuration: new Histogram({ name: `${P}http_request_duration_seconds`, help: 'HTTP request duration by route and status', labelNames: ['route', 'method', 'status'], buckets: FAST_BUCKETS, registers }),
    mintDuration: new Histogram({ name: `${P}mint_duration_seconds`, help: 'Time to mint a batch id in Redis', buckets: FAST_BUCKETS, registers }),
    enqueueDuration: new Histogram({ name: `${P}enqueue_duration_seconds`, help: 'Time to add a batch job to the queue', buckets: FAST_BUCKETS, registers }),
    queueJobs: new Gauge({ name: `${P}queue_jobs`, help: 'Jobs in the queue by state', labelNames: ['state'], registers }),
    queueOldestWaiting: new Gauge({ name: `${P}queue_oldest_waiting_age_seconds`, help: 'Age of the oldest waiting job (0 when none)', registers }),
    watermarkLag: new Gauge({ name: `${P}watermark_lag_seconds`, help: 'Age of the oldest in-flight batch over all list prefixes: newer batches are hidden from list until it is written', registers }),
    orphansReaped: new Counter({ name: `${P}orphans_reaped_total`, help: 'In-flight ids released by the reaper (minted but never enqueued, or dead-lettered)', labelNames: ['kind'], registers }),
    redisUsedMemoryRatio: new Gauge({ name: `${P}redis_memory_used_ratio`, help: 'Redis used_memory / maxmemory as last sampled by the load shedder (0 when maxmemory is unset)', registers }),
  };
  for (const o of ['accepted', 'empty', 'deduplicated', 'rejected', 'shed', 'unavailable']) m.pushes.inc({ outcome: o }, 0);
  for (const r of REJECT_REASONS) m.rejections.inc({ reason: r }, 0);
  return m;
}
export type ApiMetrics = ReturnType<typeof createApiMetrics>;
