import { Registry, collectDefaultMetrics } from 'prom-client';

/** Prefix of every metric the product exports. */
export const METRIC_PREFIX = 'ingest_';

/** Latency buckets (seconds) for HTTP and Redis calls: 1 ms to 10 s. */
export const FAST_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Buckets for encode/write/end-to-end times: a 1,000-event batch takes tens of ms; a backlog minutes. */
export const SLOW_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

/** A fresh registry with Node process metrics; each service instance owns one (tests build several). */
export function createRegistry(service: string, withDefaults: boolean | { prefix: string } = true): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ service });
  if (withDefaults)
    collectDefaultMetrics({
      register: registry,
      ...(typeof withDefaults === 'object' ? { prefix: withDefaults.prefix } : {}),
    });
  return registry;
}
