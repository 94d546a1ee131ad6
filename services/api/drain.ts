/**
 * The API's drain on SIGTERM (docs/operations.md, "Draining"): first it stops looking ready
 * (/readyz answers 503, `draining: true`) and every answer carries `Connection: close`, so load
 * balancers take it out and keep-alive clients reconnect elsewhere; it keeps serving for the
 * drain window (SHUTDOWN_DRAIN_MS); then the server stops listening (a new connection is refused),
 * finishes the requests in flight, closes the idle sockets and the queues. Pure state here; the
 * component that runs it is `apiDrain` (./components.ts).
 */

/** `serving` until SIGTERM; `draining` for the window (still serving); `closing` once the listener is closed. */
export type DrainPhase = 'serving' | 'draining' | 'closing';

/** One process's drain: its phase and when the window began. Moves forward only. */
export class DrainState {
  private current: DrainPhase = 'serving';
  private began: number | undefined;

  constructor(private readonly now: () => number = Date.now) {}

  get phase(): DrainPhase {
    return this.current;
  }

  /** True from `begin()` on: /readyz fails and answers carry `Connection: close`. */
  get draining(): boolean {
    return this.current !== 'serving';
  }

  /** Milliseconds since `begin()` (0 before it). */
  get elapsedMs(): number {
    return this.began === undefined ? 0 : this.now() - this.began;
  }

  /** Starts the window; true the first time only (a second SIGTERM, a second stop: nothing changes). */
  begin(): boolean {
    if (this.current !== 'serving') return false;
    this.current = 'draining';
    this.began = this.now();
    return true;
  }

  /** The listener is closing: in-flight requests only from here. Implies `begin()`. */
  close(): void {
    this.begin();
    this.current = 'closing';
  }
}

/**
 * How long the window lasts: SHUTDOWN_DRAIN_MS, within what is left of the stop's grace, minus
 * what has passed since it began. None when nothing listens (a stop during start-up) or when Redis
 * was away at the stop: every instance then answers pushes 503 and /readyz 503 anyway, so there
 * is no instance to move clients to, and waiting would only delay the exit.
 */
export function drainWindowMs(o: {
  drainMs: number;
  graceMs: number;
  elapsedMs: number;
  listening: boolean;
  redisUp: boolean;
}): number {
  if (!o.listening || !o.redisUp) return 0;
  return Math.max(0, Math.min(o.drainMs, o.graceMs) - o.elapsedMs);
}

/** The bound a process running the API drain gives its whole stop: the window plus the usual grace. */
export function drainedStopGraceMs(drainMs: number, graceMs: number): number {
  return drainMs + graceMs;
}
