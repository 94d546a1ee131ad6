import { type Step, done, next } from '../runner.js';
import {
  type AdmissionCode,
  type AdmissionDeps,
  type BodyRefusal,
  type Refused,
  type WithBody,
  type WithHeaders,
  refused,
} from './types.js';

const CODE_OF: Record<BodyRefusal['reason'], AdmissionCode> = {
  too_large: 'too_large',
  over_budget: 'overloaded',
  bad_encoding: 'bad_encoding',
  unreadable: 'bad_request',
};

/**
 * Step 4: the body, read within the collection's maxBodyBytes (as sent and decoded) and the
 * in-flight budget (`held` grows as it is taken). Refused `too_large`, `bad_encoding`,
 * `overloaded` (budget spent) or `bad_request` (unreadable).
 */
export function readBody(deps: AdmissionDeps): Step<WithHeaders, WithBody, Refused> {
  const { collection, inflightBudget, observer } = deps;
  return {
    name: 'read-body',
    async run(c) {
      const body = await c.input.body.read({
        maxBytes: collection.maxBodyBytes,
        coding: c.coding,
        budget: inflightBudget,
        held: c.held,
      });
      if ('bytes' in body) return next({ ...c, body, idempotencyKey: c.idempotencyKey ?? body.idempotencyKey });
      if (body.code === 'bad_json' || body.code === 'bad_envelope') observer?.rejected?.(body.code);
      else if (body.reason === 'too_large' || body.reason === 'bad_encoding') observer?.rejected?.(body.reason);
      else if (body.reason === 'over_budget') observer?.shed?.('inflight_bytes');
      return done(
        refused(body.code ?? CODE_OF[body.reason], body.detail, { retryAfter: body.retryAfter, headers: body.headers }),
      );
    },
  };
}
