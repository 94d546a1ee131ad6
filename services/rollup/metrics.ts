import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { METRIC_PREFIX as P, SLOW_BUCKETS } from '../../shared/metrics.js';

/** Metrics of the rollup service. Labels are fixed small sets: never an app, prefix or period. */
export function createRollupMetrics(registry: Registry) {
  const registers = [registry];
  const m = {
    lagSeconds: new Gauge({ name: `${P}rollup_lag_seconds`, help: 'Seconds since the oldest closed period not yet rolled ended (max over prefixes; 0 when all are rolled)', registers }),
    prefixes: new Gauge({ name: `${P}rollup_prefixes`, help: 'List prefixes the rollup planner watches', registers }),
    jobs: new Counter({ name: `${P}rollup_jobs_total`, help: 'Rollup jobs by outcome (rolled, empty, noop, delayed: not ready and tried again soon, retried, failed)', labelNames: ['outcome'], registers }),
    files: new Counter({ name: `${P}rollup_files_total`, help: 'Rollup files written', registers }),
    rows: new Counter({ name: `${P}rollup_rows_total`, help: 'Rows written to rollup files', registers }),
    bytes: new Counter({ name: `${P}rollup_bytes_total`, help: 'Bytes of rollup files written', registers }),
    failures: new Counter({ name: `${P}rollup_failures_total`, help: 'Failures outside rollup jobs, by stage: plan (reading a prefix\'s manifest, listing, queueing its job) or retention', labelNames: ['stage'], registers }),
    rawDeleted: new Counter({ name: `${P}rollup_raw_deleted_total`, help: 'Batch files deleted by raw retention after their rollup was durable', registers }),
    duration: new Histogram({ name: `${P}rollup_duration_seconds`, help: 'Time to roll one period (read, sort, write, manifest)', buckets: SLOW_BUCKETS, registers }),
  };
  for (const o of ['rolled', 'empty', 'noop', 'delayed', 'retried', 'failed']) m.jobs.inc({ outcome: o }, 0);
  for (const stage of ['plan', 'retention']) m.failures.inc({ stage }, 0);
  m.lagSeconds.set(0);
  return m;
}
export type RollupMetrics = ReturnType<typeof createRollupMetrics>;
