import { type Step, done, next } from '../runner.js';
import type { AdmissionDeps, Checked, Refused } from './types.js';
import { refused } from './types.js';

/**
 * Step 6: the per-app events budget (`rate_limited`, or `unavailable` when its store is down and
 * push fails closed). A keyed retry stores nothing new (the first answer, or a conflict), so it
 * is answered before the budget is charged, and charges nothing: the key is looked up first
 * (`unavailable` when that lookup cannot be made).
 */
export function appBudget(deps: AdmissionDeps): Step<Checked, Checked, Refused> {
  const { template } = deps;
  return {
    name: 'app-budget',
    async run(c) {
      const charge = c.input.appEvents;
      if (!charge) return next(c);
      const prefixParams = { ...c.params };
      delete prefixParams[template.batchParam];
      if (c.idempotencyKey !== undefined && deps.keyClaimed) {
        const claimed = await deps.keyClaimed(prefixParams, c.idempotencyKey, c.body.decodedHash);
        if (typeof claimed !== 'boolean')
          return done(
            refused('unavailable', `${claimed.reason}; retry later`, { retryAfter: claimed.retryAfter ?? 1 }),
          );
        if (claimed) return next(c);
      }
      const refusal = await charge(template.prefixParams.map((n) => prefixParams[n]).join('/'), c.check.events);
      return refusal ? done(refusal) : next(c);
    },
  };
}
