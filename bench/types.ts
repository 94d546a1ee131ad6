/** One line of the benchmark table. Ratios are ours / reference, measured in the same run. */
export interface BenchRow {
  scenario: string;
  metric: string;
  unit: string;
  ours: number;
  reference?: number;
  /** ours / reference. */
  ratio?: number;
  /** e.g. ">= 1.0" or "<= 0.35" (on the ratio), or a plain-language bound. */
  target?: string;
  /** Whether the target holds in this run (undefined when there is no target). */
  pass?: boolean;
}

export interface BenchContext {
  /** Shortened run for `npm test`: proves the harness works, asserts no speeds. */
  smoke: boolean;
  /**
   * Progress line (written to stderr, overwritten in place on a TTY). In a log, at most one a
   * second, unless `keep` (a result worth keeping, not a counter).
   */
  progress(message: string, opts?: { keep?: boolean }): void;
}

/** A scenario module's shape: bench/scenarios/<name>.ts exports `run`. */
export type Scenario = (ctx: BenchContext) => Promise<BenchRow[]>;
