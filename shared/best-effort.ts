import { Counter, type Registry } from 'prom-client';
import { type Logger, type ThrottledWarn, throttledWarn } from './logger.js';
import { METRIC_PREFIX } from './metrics.js';

/** Name of the counter of failed best-effort work, labelled `what`. */
export const BEST_EFFORT_FAILURES = `${METRIC_PREFIX}best_effort_failures_total`;

/** Failures of one kind of best-effort work are logged at most this often (with a count). */
export const BEST_EFFORT_LOG_MS = 5000;

/** Where a failure of best-effort work goes: a throttled warning and one counter increment. */
export interface BestEffortSink {
  logger?: Logger;
  counter?: Counter<'what'>;
}

/**
 * `ingest_best_effort_failures_total{what}` in `registry`, created once per registry (the API,
 * the encoder and the rollup service share one registry in a single process). `whats` are set
 * to 0 so a first failure shows in `increase()`.
 */
export function bestEffortCounter(registry: Registry, whats: readonly string[] = []): Counter<'what'> {
  const counter =
    (registry.getSingleMetric(BEST_EFFORT_FAILURES) as Counter<'what'> | undefined) ??
    new Counter({
      name: BEST_EFFORT_FAILURES,
      help: 'Best-effort work that failed and was given up, by what (each kind is named where it is done; the log says why, throttled)',
      labelNames: ['what'],
      registers: [registry],
    });
  for (const what of whats) counter.inc({ what }, 0);
  return counter;
}

/**
 * Waits for `work`, work whose failure the caller can live with (a later pass or a TTL repairs
 * it), and never rejects: a failure increments `counter{what}` and logs a warning naming `what`
 * and the error's name and message (never event contents), at most once per BEST_EFFORT_LOG_MS
 * per `what` and logger, with the count since the previous line.
 */
export async function bestEffort(what: string, work: Promise<unknown>, sink: BestEffortSink): Promise<void> {
  try {
    await work;
  } catch (err) {
    sink.counter?.inc({ what });
    if (sink.logger) warningFor(sink.logger, what)({ what, err: describe(err) });
  }
}

/** Messages of driver, ledger and store errors name keys and ids at most, never event contents. */
function describe(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message.slice(0, 200)}` : 'unknown';
}

const warnings = new WeakMap<Logger, Map<string, ThrottledWarn>>();

function warningFor(logger: Logger, what: string): ThrottledWarn {
  let byWhat = warnings.get(logger);
  if (!byWhat) warnings.set(logger, (byWhat = new Map()));
  let warn = byWhat.get(what);
  if (!warn) byWhat.set(what, (warn = throttledWarn(logger, 'best-effort work failed', BEST_EFFORT_LOG_MS)));
  return warn;
}
