import type { PushOutcome } from './outcome.js';

/** What a step gives the next one, or the push's outcome when the path ends there. */
export type StepResult<O> = { readonly kind: 'next'; readonly value: O } | { readonly kind: 'done'; readonly outcome: PushOutcome };

/** One named step of the push path (./steps/, in the order of their numbers). */
export interface Step<I, O> {
  readonly name: string;
  run(input: I): Promise<StepResult<O>>;
}

export const next = <O>(value: O): StepResult<O> => ({ kind: 'next', value });
export const done = (outcome: PushOutcome): StepResult<never> => ({ kind: 'done', outcome });

/**
 * Runs steps in order, each on the previous one's value, and stops at the first that ends the
 * path. Built with `then`, so each step's input type is the one before's output type.
 */
export class StepRunner<I, O> {
  private constructor(private readonly steps: readonly Step<unknown, unknown>[]) {}

  static start<I>(): StepRunner<I, I> {
    return new StepRunner<I, I>([]);
  }

  then<N>(step: Step<O, N>): StepRunner<I, N> {
    return new StepRunner<I, N>([...this.steps, step as Step<unknown, unknown>]);
  }

  /** The names of the steps, in order. */
  get names(): string[] {
    return this.steps.map((s) => s.name);
  }

  async run(input: I): Promise<StepResult<O>> {
    let value: unknown = input;
    for (const step of this.steps) {
      const r = await step.run(value);
      if (r.kind === 'done') return r;
      value = r.value;
    }
    return next(value as O);
  }
}
