import { type ChildProcess, fork } from 'node:child_process';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import type { Env } from '../../shared/config.js';
import type { Component } from '../../shared/lifecycle.js';
import { encoderProcessEnv } from './process-env.js';

type ChildMetrics = MetricObjectWithValues<MetricValue<string>>[];
/** What the parent hands each encoder process (its `start` message). */
export interface EncoderChildData {
  env: Env;
  /** 0 for the encoder that always takes jobs. */
  index: number;
  count: number;
}

/** Messages from the parent: `start` first, then `metrics` any number of times, `close` last. */
export type ToEncoderChild = { type: 'start'; data: EncoderChildData } | { type: 'metrics' } | { type: 'close' };
type FromChild = { type: 'ready' } | { type: 'metrics'; metrics: ChildMetrics } | { type: 'closed' };

interface EncoderProcess {
  metrics(): Promise<ChildMetrics | null>;
  /** Asks it to close, waits at most `graceMs` (20 s at most) for it to say so, then 2 s for its exit; kills it after that. */
  close(graceMs: number): Promise<void>;
}

/**
 * Starts encoder process `index` of `count` (the module `entry`: services/encoder-child.ts); `ready` resolves once it
 * takes jobs. Its `close` works from the start on: one asked to close while it starts finishes
 * starting, then closes. It inherits this process's Node flags (under tsx, tsx's loader) except
 * the inspector's.
 */
function startEncoderProcess(
  entry: string,
  env: Env,
  index: number,
  count: number,
  processStopping: () => boolean,
): { encoder: EncoderProcess; ready: Promise<void> } {
  // Its environment fixes glibc's mmap threshold, so a big batch's buffers are given back (services/encoder/process-env.ts).
  const child: ChildProcess = fork(entry, [], {
    serialization: 'advanced',
    execArgv: process.execArgv.filter((a) => !a.startsWith('--inspect')),
    env: encoderProcessEnv(process.env),
  });
  const waiters: ((m: FromChild) => void)[] = [];
  let exited = false;
  child.on('message', (m: FromChild) => {
    for (const w of waiters.splice(0)) w(m);
  });
  const exit = new Promise<number | string | null>((resolve) =>
    child.once('exit', (code, signal) => ((exited = true), resolve(code ?? signal))),
  );
  const next = (type: FromChild['type'], ms: number): Promise<FromChild | null> =>
    new Promise((resolve) => {
      const t = setTimeout(() => resolve(null), ms);
      const wait = (m: FromChild): void => {
        if (m.type === type) {
          clearTimeout(t);
          resolve(m);
        } else waiters.push(wait);
      };
      waiters.push(wait);
      void exit.then(() => {
        clearTimeout(t);
        resolve(null);
      });
    });
  child.on('error', (err) => {
    process.stderr.write(`encoder process ${index}: ${err.message}\n`);
  });
  const data: EncoderChildData = { env, index, count };
  child.send({ type: 'start', data });
  let closing: Promise<void> | undefined;
  let isReady = false;
  const ready = (async () => {
    if (await next('ready', 30_000)) {
      isReady = true;
      return;
    }
    // Asked to close while it started: it does not say ready, and that is not a failure.
    if (closing) return;
    child.kill('SIGKILL');
    throw new Error(`encoder process ${index} did not start`);
  })();
  // A crashed encoder must not leave an API that accepts batches nobody encodes. One that ends
  // before it is ready is a failed start, which `ready` reports (start-up then fails with exit 1).
  void exit.then((code) => {
    if (isReady && !closing && !processStopping()) {
      process.stderr.write(`encoder process ${index} exited (${String(code)}); stopping\n`);
      process.kill(process.pid, 'SIGTERM');
    }
  });
  const encoder: EncoderProcess = {
    async metrics() {
      if (exited || !child.connected) return null;
      child.send({ type: 'metrics' });
      const m = await next('metrics', 2000);
      return m && m.type === 'metrics' ? m.metrics : null;
    },
    close(graceMs) {
      closing ??= (async () => {
        if (exited) return;
        if (child.connected) child.send({ type: 'close' });
        await next('closed', Math.min(20_000, graceMs));
        // Once it says closed it exits; one that does not is stopped.
        await Promise.race([exit, new Promise((r) => setTimeout(r, 2000))]);
        if (!exited) child.kill('SIGKILL');
      })();
      return closing;
    },
  };
  return { encoder, ready };
}

/**
 * The encoder processes' metrics as one set: counters and histograms summed, and gauges summed too
 * (slots, active jobs, bytes held and workers taking jobs are totals of the service; their
 * `ingest_encoder_process_*` CPU and memory too). One that does not answer within 2 s is left out
 * of this scrape.
 */
async function encoderMetrics(encoders: readonly EncoderProcess[]): Promise<string> {
  const parts = (await Promise.all(encoders.map((t) => t.metrics()))).filter(
    (m): m is ChildMetrics => m !== null && m.length > 0,
  );
  if (parts.length === 0) return '';
  return AggregatorRegistry.aggregate(parts).metrics();
}

/** `npm start`'s encoder processes, as one lifecycle component. */
export interface EncoderProcesses extends Component {
  /** Their metrics as one Prometheus text (for the API's /metrics); '' before they start. */
  metrics(): Promise<string>;
}

/**
 * `count` encoder processes, each running the module `entry` (services/encoder-child.ts, which the
 * entry point names: it runs more than the encoder), on the environment `env()` gives at start
 * (`npm start`'s private Redis is known by then). The start resolves once each takes jobs and
 * fails when one does not start. The stop asks each to finish or return its active jobs and waits
 * for it to exit. One that ends on its own after it was ready stops the whole process (SIGTERM to
 * itself), unless `processStopping()` says that stop is already under way.
 */
export function encoderProcesses(o: {
  entry: string;
  env: () => Env;
  count: number;
  processStopping: () => boolean;
}): EncoderProcesses {
  const encoders: EncoderProcess[] = [];
  return {
    name: 'encoder processes',
    async start() {
      const env = o.env();
      const starts = Array.from({ length: o.count }, (_, i) =>
        startEncoderProcess(o.entry, env, i, o.count, o.processStopping),
      );
      encoders.push(...starts.map((s) => s.encoder));
      const failed = (await Promise.allSettled(starts.map((s) => s.ready))).find((s) => s.status === 'rejected');
      if (failed) throw failed.reason;
    },
    async stop(graceMs) {
      await Promise.all(encoders.map((t) => t.close(graceMs)));
    },
    metrics: () => encoderMetrics(encoders),
  };
}
