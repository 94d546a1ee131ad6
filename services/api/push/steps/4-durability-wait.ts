import type { Claimed, PushDeps } from '../context.js';
import type { PushOutcome } from '../outcome.js';
import { unavailable } from '../outcome.js';
import { type Step, done } from '../runner.js';

/**
 * Step 4: the answer waits for the replicas (REDIS_WAIT_REPLICAS; nothing to wait for without).
 * Enqueued, but maybe only on a master that could still fail over without it: no success. The
 * client's retry (same Idempotency-Key or body) is answered with this batch id once replicated.
 */
export function durabilityWait(deps: PushDeps): Step<Claimed, PushOutcome> {
  return {
    name: 'durability-wait',
    async run(c) {
      try {
        await deps.jobs.awaitReplicas(c.prefix);
      } catch {
        return done(unavailable('batch not yet replicated (REDIS_WAIT_REPLICAS)', true));
      }
      const { batchId, req } = c;
      return done({ kind: c.deduplicated ? 'duplicate' : 'accepted', batchId, hash: req.hash, events: req.events });
    },
  };
}
