import { bestEffort } from '../../../../shared/best-effort.js';
import { groupJobId } from '../../../../shared/redis/jobs/push.js';
import type { Built, Claimed, PushDeps } from '../context.js';
import { unavailable } from '../outcome.js';
import { EnqueueRefused } from '../ports.js';
import { type Step, done, next } from '../runner.js';

/**
 * What one enqueued job holds in Redis besides its packed body: the job hash's other fields, its
 * entries in the BullMQ events stream and the ledger (about 1 KB measured by the soak; doubled).
 */
export const JOB_OVERHEAD_BYTES = 2048;

/** How long a timed-out add's job is looked for before its outcome counts as unknown. */
const JOB_STATE_TIMEOUT_MS = 1000;

/**
 * Step 3: the job into the queue. An add that does not answer in time may still have landed:
 * found in the queue, the batch is durable; sent but not found, the outcome is unknown and the
 * id and claim stay (the retry gets this batch); never sent or refused, the id and claim are
 * given back so the retry is accepted anew.
 */
export function enqueue(deps: PushDeps): Step<Built, Claimed> {
  const { jobs, clock } = deps;
  return {
    name: 'enqueue',
    async run(b) {
      const { job, ...claimed } = b;
      if (!job) return next(claimed);
      const t1 = performance.now();
      const ticket = jobs.submit(job);
      try {
        await clock.within(ticket.done, deps.enqueueTimeoutMs, 'enqueue');
      } catch (err) {
        // Still waiting for its group: it never will be sent now, so nothing of it is in the queue.
        const sent = !ticket.withdraw();
        // A timed-out add may still have landed: then the batch is durable and must be answered as such.
        const group = ticket.group();
        const jobId = group && group[0] && group.length > 1 ? groupJobId(group[0].batchId) : job.batchId;
        const landed = sent
          ? await clock.within(jobs.hasJob(b.prefix, jobId), JOB_STATE_TIMEOUT_MS, 'job state').catch(() => false)
          : false;
        if (landed) return next(claimed);
        if (sent && !(err instanceof EnqueueRefused)) {
          // The add went out and nobody knows whether it ran: a stalled Redis runs it later, and the
          // batch is then written. So the id stays in flight (the list must not pass it before its
          // file exists) and the claim stays (the retry must get this batch, not a second file;
          // step 1 finds the job, or takes the id over once it is abandoned). If no job ever
          // appears, the reaper releases the id after ORPHAN_GRACE_SECONDS.
          deps.observe.enqueueUnknown?.();
          return done(
            unavailable(
              'queue did not answer in time (Redis), so this batch may still be queued: send the same body (and Idempotency-Key) again to get its id',
              true,
            ),
          );
        }
        // Not enqueued: take the id out of flight so it does not hold the list back, and forget
        // the claim so the client's retry is accepted. If Redis is unreachable this fails too;
        // the id then stays in flight and the retry takes it over (step 1).
        await bestEffort('push_release', deps.ledger.release(b.prefix, b.batchId, b.claim), deps.bestEffort);
        return done(unavailable('queue unavailable (Redis)', false));
      } finally {
        deps.observe.enqueueSeconds?.((performance.now() - t1) / 1000);
      }
      deps.observe.enqueuedBytes?.(job.body.length + JOB_OVERHEAD_BYTES);
      return next(claimed);
    },
  };
}
