import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { METRIC_PREFIX as P, SLOW_BUCKETS } from '../../shared/metrics.js';
import { bestEffortCounter } from '../../shared/best-effort.js';

/** Metrics of the rollup service. Labels are fixed small sets: never an app, prefix or period. */
export function createRollupMetrics(registry: Registry) {
  const registers = [registry];
  const m = {
    lagSeconds: new Gauge({
      name: `${P}rollup_lag_seconds`,
      help: 'Seconds since the oldest closed period not yet rolled ended (max over prefixes; 0 when all are rolled)',
      registers,
    }),
    prefixes: new Gauge({ name: `${P}rollup_prefixes`, help: 'List prefixes the rollup planner watches', registers }),
    jobs: new Counter({
      name: `${P}rollup_jobs_total`,
      help: 'Rollup jobs by outcome (rolled, empty, noop, delayed: not ready and tried again soon, retried, failed)',
      labelNames: ['outcome'],
      registers,
    }),
    files: new Counter({ name: `${P}rollup_files_total`, help: 'Rollup files written', registers }),
    rows: new Counter({ name: `${P}rollup_rows_total`, help: 'Rows written to rollup files', registers }),
    bytes: new Counter({ name: `${P}rollup_bytes_total`, help: 'Bytes of rollup files written', registers }),
    failures: new Counter({
      name: `${P}rollup_failures_total`,
      help: "Failures outside rollup jobs, by stage: plan (reading a prefix's manifest, listing, queueing its job) or retention",
      labelNames: ['stage'],
      registers,
    }),
    rawDeleted: new Counter({
      name: `${P}rollup_raw_deleted_total`,
      help: 'Batch files deleted by raw retention after their rollup was durable',
      registers,
    }),
    /**
     * `plan_after_roll`: planning a prefix's next period right after a roll (the next planner pass does it);
     * `rollup_lock_renew` / `rollup_lock_release`: a prefix lock's renewal or release (shared/redis/rollup-keys.ts).
     */
    bestEffortFailures: bestEffortCounter(registry, ['plan_after_roll', 'rollup_lock_renew', 'rollup_lock_release']),
    duration: new Histogram({
      name: `${P}rollup_duration_seconds`,
      help: 'Time to roll one period (read, sort, write, manifest)',
      buckets: SLOW_BUCKETS,
      registers,
    }),
  };
  for (const o of ['rolled', 'empty', 'noop', 'delayed', 'retried', 'failed']) m.jobs.inc({ outcome: o }, 0);
  for (const stage of ['plan', 'retention']) m.failures.inc({ stage }, 0);
  m.lagSeconds.set(0);
  return m;
}
export type RollupMetrics = ReturnType<typeof createRollupMetrics>;

/** Metrics of the Iceberg committer (iceberg-committer.ts). Labels are fixed small sets: never an app. */
export function createIcebergMetrics(registry: Registry, o: { intervalSeconds: number; lagSeconds: () => number }) {
  const registers = [registry];
  const counts = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 50_000];
  const m = {
    commits: new Counter({
      name: `${P}iceberg_commits_total`,
      help: 'Iceberg snapshots committed, by operation (append, replace, delete) and expiries (expire)',
      labelNames: ['operation'],
      registers,
    }),
    failures: new Counter({
      name: `${P}iceberg_commit_failures_total`,
      help: 'Iceberg commit passes of a table that failed (retried on the next pass), by stage (commit, expire, orphans; version_hint and cleanup: work a commit gave up without failing)',
      labelNames: ['stage'],
      registers,
    }),
    duration: new Histogram({
      name: `${P}iceberg_commit_duration_seconds`,
      help: 'Time of one Iceberg commit (manifests, manifest list, metadata create)',
      labelNames: ['operation'],
      buckets: SLOW_BUCKETS,
      registers,
    }),
    files: new Histogram({
      name: `${P}iceberg_snapshot_files`,
      help: 'Data files added by each snapshot',
      labelNames: ['operation'],
      buckets: counts,
      registers,
    }),
    rows: new Histogram({
      name: `${P}iceberg_snapshot_rows`,
      help: 'Rows added by each snapshot',
      labelNames: ['operation'],
      buckets: counts.map((c) => c * 100),
      registers,
    }),
    lagSeconds: new Gauge({
      name: `${P}iceberg_lag_seconds`,
      help: "Seconds since an app's table last held every batch the list showed (max over tables): up to one commit interval plus a pass when healthy, growing when commits stop",
      registers,
      collect() {
        this.set(o.lagSeconds());
      },
    }),
    interval: new Gauge({
      name: `${P}iceberg_commit_interval_seconds`,
      help: 'ICEBERG_COMMIT_SECONDS of this rollup process (the lag alert compares with it)',
      registers,
    }),
    dataDeleted: new Counter({
      name: `${P}iceberg_data_files_deleted_total`,
      help: 'Batch and rollup files deleted from the store once no retained snapshot referenced them',
      registers,
    }),
  };
  for (const op of ['append', 'replace', 'delete', 'expire']) m.commits.inc({ operation: op }, 0);
  for (const stage of ['commit', 'expire', 'orphans', 'version_hint', 'cleanup']) m.failures.inc({ stage }, 0);
  for (const operation of ['append', 'replace', 'delete']) {
    m.duration.zero({ operation });
    m.files.zero({ operation });
    m.rows.zero({ operation });
  }
  m.interval.set(o.intervalSeconds);
  return m;
}
export type IcebergMetrics = ReturnType<typeof createIcebergMetrics>;
