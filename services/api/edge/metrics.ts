import { Counter, Histogram, type Registry } from 'prom-client';
import { FAST_BUCKETS, METRIC_PREFIX as P } from '../../../shared/metrics.js';

const ACTIONS = ['push', 'pull', 'list'] as const;
const RULES = ['identity', 'ip', 'identity+ip', 'app_events'] as const;

/** Metrics of the edge middleware. Labels are fixed small sets: never an app, identity or address. */
export function createEdgeMetrics(registry: Registry) {
  const registers = [registry];
  const m = {
    rateLimited: new Counter({
      name: `${P}rate_limited_total`,
      help: 'Requests refused with 429 by rule: the action and the bucket that was over (app_events: the per-app push budget)',
      labelNames: ['action', 'rule'],
      registers,
    }),
    rateLimitStoreErrors: new Counter({
      name: `${P}rate_limit_store_errors_total`,
      help: 'Rate-limit checks that could not reach Redis, by action and what the request got (open: let through, closed: 503)',
      labelNames: ['action', 'outcome'],
      registers,
    }),
    rateLimitCheck: new Histogram({
      name: `${P}rate_limit_check_duration_seconds`,
      help: 'Time of one rate-limit check (all counters of a rule, one Redis round trip)',
      buckets: FAST_BUCKETS,
      registers,
    }),
    requestTimeouts: new Counter({
      name: `${P}request_timeouts_total`,
      help: 'Requests answered 408 after REQUEST_TIMEOUT_MS',
      registers,
    }),
    authFailures: new Counter({
      name: `${P}auth_failures_total`,
      help: 'Requests refused by auth (401 no or invalid credentials, 403 missing role)',
      labelNames: ['status'],
      registers,
    }),
  };
  for (const a of ACTIONS)
    for (const r of RULES) if (r !== 'app_events' || a === 'push') m.rateLimited.inc({ action: a, rule: r }, 0);
  for (const a of ACTIONS) for (const o of ['open', 'closed']) m.rateLimitStoreErrors.inc({ action: a, outcome: o }, 0);
  for (const s of ['401', '403']) m.authFailures.inc({ status: s }, 0);
  return m;
}
export type EdgeMetrics = ReturnType<typeof createEdgeMetrics>;
