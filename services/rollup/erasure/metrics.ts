import { Counter, Histogram, type Registry } from 'prom-client';
import { METRIC_PREFIX as P, SLOW_BUCKETS } from '../../../shared/metrics.js';
import type { RewrittenFile } from './erase.js';

/** Metrics of erasure jobs (issue 36). Labels are fixed small sets: never an app, prefix or id. */
export function createEraseMetrics(registry: Registry) {
  const registers = [registry];
  const m = {
    jobs: new Counter({
      name: `${P}erasure_jobs_total`,
      help: 'Erasure job transitions by state (running: an attempt started, completed, retried, failed: dead-lettered)',
      labelNames: ['state'],
      registers,
    }),
    files: new Counter({
      name: `${P}erasure_files_rewritten_total`,
      help: 'Files an erasure rewrote without the erased rows, by kind (batch, rollup)',
      labelNames: ['kind'],
      registers,
    }),
    rows: new Counter({
      name: `${P}erasure_rows_erased_total`,
      help: 'Rows removed from files by erasures (a row in a batch file and in a rollup counts twice)',
      labelNames: ['kind'],
      registers,
    }),
    duration: new Histogram({
      name: `${P}erasure_duration_seconds`,
      help: 'Time of one erasure job attempt that completed (scan, watermark wait, rescan, Iceberg, log)',
      buckets: [...SLOW_BUCKETS, 1200],
      registers,
    }),
    /** Counts the files of a pass (not in a dry run). */
    count(files: readonly RewrittenFile[], dryRun: boolean): void {
      if (dryRun) return;
      for (const f of files) {
        m.files.inc({ kind: f.kind });
        m.rows.inc({ kind: f.kind }, f.rowsErased);
      }
    },
  };
  for (const s of ['running', 'completed', 'retried', 'failed']) m.jobs.inc({ state: s }, 0);
  for (const kind of ['batch', 'rollup']) {
    m.files.inc({ kind }, 0);
    m.rows.inc({ kind }, 0);
  }
  return m;
}
export type EraseMetrics = ReturnType<typeof createEraseMetrics>;
