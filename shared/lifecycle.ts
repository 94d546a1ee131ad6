/**
 * One way to start and stop a process (DESIGN.md, "One lifecycle"; Fastify's ordered `onClose`
 * hooks with one timeout): an entry point lists the components it runs, a `Lifecycle` starts
 * them in that order and stops them in the reverse order within one bounded grace, and
 * `runUntilSignal` ties the stop to SIGTERM/SIGINT and the exit code.
 */

/** Something a process starts and stops: a server, a worker, a connection, a child process. */
export interface Component {
  /** Named in the logs when its stop fails or overruns the grace. */
  readonly name: string;
  start(): Promise<void>;
  /**
   * Stops within about `graceMs`: finish what is in flight, then let go of the rest (0 means at
   * once). It may be called while `start()` is still running (a stop that comes during start-up,
   * or a failed start: it must cope with a partial start) and more than once.
   */
  stop(graceMs: number): Promise<void>;
}

/** The logger calls a lifecycle makes (a pino Logger fits). */
export interface LifecycleLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
  /** Called (bounded to 2 s) before the process exits, so the last lines reach the log. */
  flush?(cb: (err?: Error) => void): void;
}

/** How a stop went. */
export interface StopReport {
  /** Components whose stop did not finish within the grace (the process should exit non-zero). */
  notStopped: string[];
  /** Components whose stop threw (logged; the others were still stopped). */
  failed: string[];
}

export interface LifecycleOptions {
  logger: LifecycleLogger;
  /** Grace for stopping what had started when a later component fails to start (default 5 s). */
  startFailureGraceMs?: number;
}

/** Resolves after `ms` (unless `cancel` is called first); the timer never holds the process. */
function delay(ms: number): { done: Promise<'timeout'>; cancel(): void } {
  let timer: NodeJS.Timeout | undefined;
  const done = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), Math.max(0, ms));
    timer.unref();
  });
  return { done, cancel: () => clearTimeout(timer) };
}

/**
 * Starts components in order and stops them in reverse order. A component that fails to start
 * is stopped (it may have started part of itself), then the ones before it in reverse, and the
 * start rejects with its error. `stop(graceMs)` gives each component what is left of one overall
 * grace; past it, it stops waiting: it logs the component that did not stop, asks the rest to
 * stop at once without waiting for them, and resolves with their names, so the caller can exit
 * non-zero. Both are idempotent; a stop while the start runs stops the component being started
 * and everything before it, and no further component starts.
 */
export class Lifecycle {
  private readonly components: readonly Component[];
  private readonly logger: LifecycleLogger;
  private readonly startFailureGraceMs: number;
  private readonly started: Component[] = [];
  private current: Component | undefined;
  private starting: Promise<void> | undefined;
  private stopping: Promise<StopReport> | undefined;

  constructor(components: readonly Component[], opts: LifecycleOptions) {
    this.components = [...components];
    this.logger = opts.logger;
    this.startFailureGraceMs = opts.startFailureGraceMs ?? 5000;
  }

  /** The components' names in start order. */
  get names(): string[] {
    return this.components.map((c) => c.name);
  }

  /** True once a stop was asked for (a component that ends meanwhile is part of it, not a failure). */
  get isStopping(): boolean {
    return this.stopping !== undefined;
  }

  start(): Promise<void> {
    this.starting ??= this.startAll();
    return this.starting;
  }

  private async startAll(): Promise<void> {
    for (const c of this.components) {
      if (this.stopping) return;
      this.current = c;
      try {
        await c.start();
      } catch (err) {
        this.current = undefined;
        // A start that fails because a stop came meanwhile is part of that stop.
        if (this.stopping) return;
        this.started.push(c);
        await this.stop(this.startFailureGraceMs);
        throw err;
      }
      this.current = undefined;
      // Stopped while it started: the stop already covered it.
      if (this.stopping) return;
      this.started.push(c);
    }
  }

  stop(graceMs: number): Promise<StopReport> {
    this.stopping ??= this.stopAll(graceMs);
    return this.stopping;
  }

  private async stopAll(graceMs: number): Promise<StopReport> {
    const order = [...(this.current ? [this.current] : []), ...[...this.started].reverse()];
    const deadline = Date.now() + graceMs;
    const report: StopReport = { notStopped: [], failed: [] };
    for (const [i, c] of order.entries()) {
      const left = Math.max(0, deadline - Date.now());
      const wait = delay(left);
      const outcome = await Promise.race([this.stopOne(c, left), wait.done]);
      wait.cancel();
      if (outcome === 'failed') report.failed.push(c.name);
      if (outcome !== 'timeout') continue;
      // Past the grace: name what did not stop, ask the rest to stop at once, wait for none.
      this.logger.error({ component: c.name, graceMs }, 'component did not stop within the grace; not waiting for it');
      const rest = order.slice(i + 1);
      report.notStopped.push(c.name, ...rest.map((r) => r.name));
      for (const r of rest) void this.stopOne(r, 0);
      if (rest.length > 0)
        this.logger.error({ components: rest.map((r) => r.name) }, 'asked to stop at once, not waited for');
      break;
    }
    return report;
  }

  /** Stops `c`; a failure is logged here and reported as 'failed' (never a rejection). */
  private async stopOne(c: Component, graceMs: number): Promise<'stopped' | 'failed'> {
    try {
      await c.stop(graceMs);
      return 'stopped';
    } catch (err) {
      this.logger.warn(
        { component: c.name, err: err instanceof Error ? err.message : String(err) },
        'component stop failed',
      );
      return 'failed';
    }
  }
}

/** Where signals come from and how the process ends (the process itself; a fake in tests). */
export interface ProcessHost {
  on(signal: NodeJS.Signals, listener: () => void): unknown;
  exit(code: number): void;
}

export interface RunOptions {
  logger: LifecycleLogger;
  /** One bound for the whole stop; past it the process exits 1 naming what did not stop. */
  graceMs: number;
  /** Signals that stop the process (default SIGTERM and SIGINT). */
  signals?: readonly NodeJS.Signals[];
  /**
   * Hands over a stop for other triggers (an IPC channel that closes, a parent's message): it
   * runs the same stop as a signal, and, unlike a second signal, never forces.
   */
  stopWhen?: (stop: (reason: string) => void) => void;
  /** Runs after the stop and the log flush, before the exit (tell a parent); failures are ignored. */
  beforeExit?: (code: number) => Promise<void> | void;
  /** A second signal within this long of the first is the same request delivered twice (default 2 s). */
  duplicateSignalMs?: number;
  host?: ProcessHost;
  now?: () => number;
}

/** Flushes a logger that buffers (pino's async destinations), waiting at most 2 s. */
async function flush(logger: LifecycleLogger): Promise<void> {
  if (!logger.flush) return;
  const wait = delay(2000);
  await Promise.race([
    new Promise<void>((resolve) => {
      try {
        logger.flush?.(() => resolve());
      } catch {
        resolve();
      }
    }),
    wait.done,
  ]);
  wait.cancel();
}

/**
 * Runs `lifecycle` until a signal: arms SIGTERM/SIGINT first (a signal during start-up stops what
 * has started, in the same order), then starts it; resolves once started, rejects when the start
 * fails (after stopping what had started). On the first signal it stops within `graceMs` and
 * exits 0, or 1 when a component did not stop in time. A later signal exits 1 at once; the same
 * signal again within `duplicateSignalMs` is ignored (process managers and wrappers, npm, tsx,
 * `pkill -f`, often deliver one SIGTERM twice within moments).
 */
export async function runUntilSignal(lifecycle: Lifecycle, opts: RunOptions): Promise<void> {
  const host: ProcessHost = opts.host ?? process;
  const now = opts.now ?? Date.now;
  const duplicateMs = opts.duplicateSignalMs ?? 2000;
  let stopping: Promise<void> | undefined;
  let firstSignalAt = 0;
  const stop = (reason: string): void => {
    stopping ??= (async () => {
      opts.logger.info({ reason, components: lifecycle.names }, 'shutting down');
      const report = await lifecycle.stop(opts.graceMs);
      const code = report.notStopped.length > 0 ? 1 : 0;
      if (code === 0) opts.logger.info({}, 'shut down cleanly');
      else
        opts.logger.error({ graceMs: opts.graceMs, notStopped: report.notStopped }, 'shutdown took too long; exiting');
      await flush(opts.logger);
      try {
        await opts.beforeExit?.(code);
      } catch {
        // Exiting anyway: what beforeExit does is best effort (a last IPC message).
      }
      host.exit(code);
    })();
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    if (stopping && now() - firstSignalAt < duplicateMs) return;
    if (stopping) {
      opts.logger.warn({ signal }, 'second signal: exiting now');
      host.exit(1);
      return;
    }
    firstSignalAt = now();
    stop(signal);
  };
  for (const signal of opts.signals ?? ['SIGTERM', 'SIGINT']) host.on(signal, () => onSignal(signal));
  opts.stopWhen?.(stop);
  await lifecycle.start();
}

/**
 * One component as two list entries, for one that must start late but stop late too:
 * `stop` goes where its stop belongs in the reverse order (its start does nothing), `start`
 * where its start belongs (its stop does nothing). `npm start`'s encoder processes are forked
 * once the API answers, and closed once it stopped taking pushes.
 */
export function splitStartStop(c: Component): { start: Component; stop: Component } {
  return {
    start: { name: `${c.name} (start)`, start: () => c.start(), stop: async () => undefined },
    stop: { name: c.name, start: async () => undefined, stop: (graceMs) => c.stop(graceMs) },
  };
}

/**
 * Resolves once `p` (a component's start) has settled, either way: a stop that comes while its
 * start runs waits for it, then stops what it made. Its failure is the start's to report.
 */
export async function settled(p: Promise<unknown> | undefined): Promise<void> {
  await p?.then(
    () => undefined,
    () => undefined,
  );
}
