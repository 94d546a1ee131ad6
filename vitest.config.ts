import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * Test tiers (README, "Tests"). A test's tier is chosen here, not by moving its file:
 * - unit: test/unit without the files below that start processes or open sockets. No services,
 *   no global setup; test/helpers/unit-guard.ts refuses child processes and sockets.
 * - integration: test/integration against a private redis-server (test/global-setup.ts), s3rver,
 *   DuckDB and the product's processes run from sources.
 * - system: what needs more than that (listed by name below).
 */
export const UNIT_NOT_UNIT = [
  // Counts V8's full collections in child processes (execFile), 8 s of the tier's time.
  'test/unit/heap-growth.test.ts',
  // Runs the CLI's sync against an HTTP server on a loopback socket.
  'test/unit/sync-retention.test.ts',
];

export const SYSTEM = [
  // The compiled dist/ (plus Ceph RGW), the packed package.
  'test/integration/e2e.test.ts',
  'test/integration/package.test.ts',
  // Ceph RADOS Gateway.
  'test/integration/rgw.test.ts',
  'test/integration/store-conformance.test.ts',
  'test/integration/rgw-iceberg-credentials.test.ts',
  // Redis Cluster.
  'test/integration/cluster.test.ts',
  'test/integration/cluster-failover.test.ts',
  // Redis Sentinel: a master, two replicas and three sentinels (issue 45, acceptance 4).
  'test/integration/sentinel-failover.test.ts',
  // A master and a replica started later: the encoder holds a job back until a replica has it (decision 0025).
  'test/integration/encoder-replica-wait.test.ts',
  // The Helm chart's ScaledObject against a 3-master Redis Cluster (issue 45, acceptance 2).
  'test/integration/helm-keda-cluster.test.ts',
  // The chart's KEDA rule against real encoder processes started and SIGTERM'd (issue 45, acceptance 3 and 6).
  'test/integration/encoder-autoscale.test.ts',
  // Chromium.
  'test/integration/browser.test.ts',
  'test/integration/segment-browser.test.ts',
  // Prometheus and promtool.
  'test/integration/observability.test.ts',
  // Short forms of npm run chaos, soak, bench and rollup-acceptance.
  'test/integration/chaos.test.ts',
  'test/integration/soak.test.ts',
  'test/integration/bench-smoke.test.ts',
  // npm run profile, briefly (a second of load at saturation, then two CPU profiles read back).
  'test/integration/profile-smoke.test.ts',
  'test/integration/rollup-acceptance.test.ts',
  'test/integration/rollup-acceptance-faults.test.ts',
  // Short form of npm run iceberg-acceptance (real processes, kill -9, Ceph RGW).
  'test/integration/iceberg-acceptance.test.ts',
  // Rolling replacement of three API processes behind a loopback load balancer, under pushes (issue 45, acceptance 5 and 6).
  'test/integration/rollout.test.ts',
  // Erasure with real processes and two kill -9.
  'test/integration/erasure-kill.test.ts',
  // Short form of npm run erasure-acceptance (real processes, the CLI, two kill -9, Iceberg, sync).
  'test/integration/erasure-acceptance.test.ts',
];

export default defineConfig({
  // The package's own name resolves to the sources in tests (package.json's exports point at dist/).
  resolve: {
    alias: [
      { find: /^events-ingest$/, replacement: fileURLToPath(new URL('./index.ts', import.meta.url)) },
      {
        find: /^events-ingest\/s3$/,
        replacement: fileURLToPath(new URL('./shared/store/s3/index.ts', import.meta.url)),
      },
    ],
  },
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration files start processes and servers; two cores do not gain from more workers.
    maxWorkers: 2,
    pool: 'forks',
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          exclude: UNIT_NOT_UNIT,
          setupFiles: ['test/helpers/unit-guard.ts'],
        },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts', ...UNIT_NOT_UNIT],
          exclude: SYSTEM,
          globalSetup: ['test/global-setup.ts'],
          // Every answer of the product's API is checked against its own OpenAPI document.
          setupFiles: ['test/helpers/openapi-hook.ts'],
        },
      },
      {
        extends: true,
        test: {
          name: 'system',
          include: SYSTEM,
          globalSetup: ['test/global-setup.ts'],
        },
      },
    ],
  },
});
