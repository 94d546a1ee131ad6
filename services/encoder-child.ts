import { readdirSync } from 'node:fs';
import { setPriority } from 'node:os';
import type { Env } from '../shared/config.js';
import { Lifecycle, runUntilSignal } from '../shared/lifecycle.js';
import { StackContext, redisConnections } from '../shared/stack-context.js';
import { encoderWorkers } from './encoder/components.js';
import type { EncoderChildData, ToEncoderChild } from './encoder/processes.js';
import { rollupService } from './rollup/components.js';

/**
 * The encoder as a child process of `npm start` (services/main.ts forks it): encoding (CPU-bound:
 * JSON → Arrow → Parquet) and its file writes run beside the API's event loop, at a lower CPU
 * priority (ENCODER_NICE) for every thread of the process, so pushes are answered first and the
 * queue absorbs the difference. The first encoder process also runs the rollup service (its
 * planner lists store folders, its worker runs DuckDB), at the same priority.
 *
 * With ENCODER_PROCESSES above 1, encoder 0 always takes jobs and the others are burst encoders
 * (they take jobs only while the queue has a backlog: EncoderOptions.burst); they split
 * ENCODER_MAX_INFLIGHT_BYTES evenly.
 *
 * Messages from the parent (IPC, advanced serialization): `{ type: 'start', data }` first →
 * `{ type: 'ready' }` once it takes jobs; `{ type: 'metrics' }` → `{ type: 'metrics', metrics }`
 * (prom-client's JSON form, which the parent sums over its encoders); `{ type: 'close' }` →
 * finishes or returns active jobs, then `{ type: 'closed' }` and exits.
 *
 * It stops by itself (the same way) on SIGTERM or when the parent is gone (its IPC channel
 * closes). SIGINT is left to the parent: Ctrl-C reaches the whole process group, and the parent
 * stops taking pushes before it closes its encoders.
 *
 * An entry point of its own at the top of services/ (not in services/encoder/): it composes the
 * encoder and the rollup service, as services/main.ts does.
 *
 * Why a process at a lower priority, with the rollups: docs/decisions/0014-encoder-child-process.md.
 */
type Inbound = ToEncoderChild;

/** How often a burst encoder counts the jobs waiting in the queue. */
const BURST_POLL_MS = 250;

if (!process.send)
  throw new Error('services/encoder-child.ts runs as a child process of services/main (fork), with an IPC channel');

/** Sends to the parent while the channel is open (a parent that is gone gets nothing). */
function tell(msg: unknown): void {
  if (process.connected) process.send?.(msg);
}

/**
 * Lowers the CPU priority of every thread of this process. On Linux `setpriority` on a thread id
 * names one thread, so each existing thread (V8's helpers, libuv's pool if started) is set, and
 * threads made later inherit it from the main thread. Elsewhere the call covers the process.
 * Returns the niceness set, or 0 where it could not be set.
 */
function niceThisProcess(nice: number): number {
  if (nice <= 0) return 0;
  try {
    setPriority(0, nice);
    let tids: string[] = [];
    try {
      tids = readdirSync('/proc/self/task');
    } catch {
      return nice;
    }
    for (const tid of tids) {
      try {
        setPriority(Number(tid), nice);
      } catch {
        // A thread that ended meanwhile.
      }
    }
    return nice;
  } catch {
    return 0;
  }
}

let ctx: StackContext | undefined;
/** Asks the running lifecycle to stop (set once the start message came). */
let stopLifecycle: ((reason: string) => void) | undefined;
let stopAsked = false;

/** A stop that takes longer than this (a store or Redis that hangs) ends the process anyway, with exit 1. */
const CLOSE_BOUND_MS = 30_000;

/**
 * Closes the encoder (active jobs finish or go back to the queue), tells the parent, and exits.
 * Asked again (SIGTERM, the parent's message, its channel closing) it keeps to the first stop.
 */
function closeAndExit(reason: string): void {
  stopAsked = true;
  if (stopLifecycle) return stopLifecycle(reason);
  // Nothing started yet.
  tell({ type: 'closed' });
  process.exit(0);
}

function start(data: EncoderChildData): Promise<void> {
  const env: Env = {
    ...data.env,
    ENCODER_MAX_INFLIGHT_BYTES: Math.max(1, Math.floor(data.env.ENCODER_MAX_INFLIGHT_BYTES / data.count)),
  };
  const nice = niceThisProcess(env.ENCODER_NICE);
  // The first encoder's slots fetch up to ENCODER_CONCURRENCY jobs; a burst encoder joins when as many again wait.
  const burst = data.index > 0 ? { backlog: env.ENCODER_CONCURRENCY, pollMs: BURST_POLL_MS } : undefined;
  const c = (ctx = new StackContext(env, {
    name: 'encoder',
    serviceLabel: 'ingest',
    defaultMetrics: { prefix: 'ingest_encoder_' },
  }));
  const encoder = encoderWorkers(c, burst ? { burst } : {});
  // The first encoder also runs `npm start`'s rollups (unless ROLLUP=off), at this process's priority.
  const lifecycle = new Lifecycle([redisConnections(c), ...(data.index === 0 ? [rollupService(c)] : []), encoder], {
    logger: c.logger,
  });
  // Signals are this module's (SIGINT is the parent's); each trigger runs the one stop.
  const running = runUntilSignal(lifecycle, {
    logger: c.logger,
    graceMs: CLOSE_BOUND_MS,
    signals: [],
    stopWhen: (stop) => (stopLifecycle = stop),
    // Then it exits: what may still hold the event loop is a reconnect timer to an unreachable Redis.
    beforeExit: () => tell({ type: 'closed' }),
  });
  return running.then(() => {
    if (stopAsked) return;
    c.logger.info(
      {
        encoder: data.index,
        burst: burst !== undefined,
        queue: env.QUEUE_NAME,
        concurrency: env.ENCODER_CONCURRENCY,
        maxInflightBytes: env.ENCODER_MAX_INFLIGHT_BYTES,
        store: c.store.describe(),
        nice,
      },
      'encoder process started',
    );
    tell({ type: 'ready' });
  });
}

process.on('SIGINT', () => undefined);
process.on('SIGTERM', () => closeAndExit('SIGTERM'));
process.on('disconnect', () => closeAndExit('parent gone'));
process.on('message', (msg: Inbound) => {
  if (msg.type === 'start') {
    const starting = (async () => start(msg.data))();
    starting.catch((err: unknown) => {
      // A start that fails during a stop is part of that stop.
      if (stopAsked) return;
      process.stderr.write(
        `encoder process failed to start: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
      );
      process.exit(1);
    });
  } else if (msg.type === 'metrics') {
    if (!ctx) return tell({ type: 'metrics', metrics: [] });
    ctx.registry.getMetricsAsJSON().then(
      (metrics) => tell({ type: 'metrics', metrics }),
      () => tell({ type: 'metrics', metrics: [] }),
    );
  } else if (msg.type === 'close') {
    closeAndExit('asked by npm start');
  }
});
