import { type Step, done, next } from '../runner.js';
import { type AdmissionDeps, type Admitting, type Refused, refused } from './types.js';

/** Seconds a shed push is told to wait: the shedder samples the queue about that often. */
const SHED_RETRY_AFTER_SECONDS = 2;

/**
 * Step 1: load shedding (QUEUE_HIGH_WATER, REDIS_MEMORY_HIGH_WATER), before anything else is
 * looked at: refused `overloaded` with a wait, its body drained first so the answer arrives.
 */
export function shed(deps: AdmissionDeps): Step<Admitting, Admitting, Refused> {
  return {
    name: 'shed',
    async run(c) {
      const reason = deps.shedReason?.();
      if (!reason) return next(c);
      deps.observer?.shed?.('high_water');
      const headers = await c.input.body.discard();
      return done(
        refused('overloaded', `overloaded: ${reason}; retry later`, { retryAfter: SHED_RETRY_AFTER_SECONDS, headers }),
      );
    },
  };
}
