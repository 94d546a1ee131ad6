import type { PushOutcome } from './outcome.js';

/** What a step gives the next one, or the path's end (`D`: the push's outcome, or an admission refusal). */
export type StepResult<O, D = PushOutcome> =
  { readonly kind: 'next'; readonly value: O } | { readonly kind: 'done'; readonly outcome: D };

/** One named step of a path (./steps/ and ./admission/, in the order of their numbers). */
export interface Step<I, O, D = PushOutcome> {
  readonly name: string;
  run(input: I): Promise<StepResult<O, D>>;
}

/**
 * Told, after each step that ran, its name and how long it took in seconds, whether it passed the
 * push on or ended its path (a refusal counts too). A step that threw is not reported.
 */
export type StepTimer = (step: string, seconds: number) => void;

export const next = <O>(value: O): StepResult<O, never> => ({ kind: 'next', value });
export const done = <D = PushOutcome>(outcome: D): StepResult<never, D> => ({ kind: 'done', outcome });

/**
 * Runs steps in order, each on the previous one's value, and stops at the first that ends the
 * path. Built with `then`, so each step's input type is the one before's output type.
 */
export class StepRunner<I, O, D = PushOutcome> {
  private constructor(private readonly steps: readonly Step<unknown, unknown, D>[]) {}

  static start<I, D = PushOutcome>(): StepRunner<I, I, D> {
    return new StepRunner<I, I, D>([]);
  }

  then<N>(step: Step<O, N, D>): StepRunner<I, N, D> {
    return new StepRunner<I, N, D>([...this.steps, step as Step<unknown, unknown, D>]);
  }

  /** The names of the steps, in order. */
  get names(): string[] {
    return this.steps.map((s) => s.name);
  }

  async run(input: I, timer?: StepTimer): Promise<StepResult<O, D>> {
    let value: unknown = input;
    // One clock read per step: a step's end is the next one's start.
    let t0 = timer ? performance.now() : 0;
    for (const step of this.steps) {
      const r = await step.run(value);
      if (timer) {
        const t1 = performance.now();
        timer(step.name, (t1 - t0) / 1000);
        t0 = t1;
      }
      if (r.kind === 'done') return r;
      value = r.value;
    }
    return next(value as O);
  }
}
