import { bestEffort } from '../../../../shared/best-effort.js';
import { batchIdMs } from '../../../../shared/ids.js';
import type { MintResult } from '../../../../shared/ledger/ledger.js';
import { batchKey } from '../../../../shared/paths.js';
import type { Claimed, PushContext, PushDeps } from '../context.js';
import { type PushOutcome, unavailable } from '../outcome.js';
import { type Step, type StepResult, done, next } from '../runner.js';

/** Mints at most this often per push: the first mint, and once more after a lost first push. */
const MINT_ATTEMPTS = 2;
/** Polls of a retried push waiting for its first push's job (bounded by the deadline too). */
const CONFIRM_POLLS = 100;
const CONFIRM_POLL_MS = 50;

type Seen = 'enqueued' | 'gone' | 'abandoned';

/**
 * Step 1: the batch id. A new push mints one (and claims its key or body). A retry gets the first
 * push's id, answered only once that push's job exists, so a success always means durable; a first
 * push that was lost before it was queued (its id reaped) is minted anew, once.
 */
export function claimId(deps: PushDeps): Step<PushContext, Claimed> {
  const { ledger, clock, enqueueTimeoutMs } = deps;

  async function mint(ctx: PushContext): Promise<MintResult | PushOutcome> {
    const t0 = performance.now();
    try {
      return await clock.within(ledger.mint(ctx.prefix, ctx.claim), enqueueTimeoutMs, 'id minting');
    } catch {
      return unavailable('queue unavailable (Redis)', false);
    } finally {
      deps.observe.mintSeconds?.((performance.now() - t0) / 1000);
    }
  }

  /**
   * A retry may arrive while the first push is between minting and enqueueing. `gone`: the id left
   * flight without a job (written and removed, or reaped). `abandoned`: the id is still in flight
   * with no job long after the first push must have finished or given up (its API died in between).
   */
  async function confirmEnqueued(prefix: string, batchId: string): Promise<Seen | PushOutcome> {
    // The first push enqueues within enqueueTimeoutMs of minting or releases the id; twice that
    // plus a margin leaves room for clock skew between this host and the Redis that minted it.
    const abandonedAfterMs = 2 * enqueueTimeoutMs + 1000;
    const deadline = clock.now() + enqueueTimeoutMs;
    for (let i = 0; i < CONFIRM_POLLS && clock.now() < deadline; i++) {
      try {
        if (await deps.jobs.hasJob(prefix, batchId)) return 'enqueued';
        // A group's member: its job is the group's (noted in the ledger with that job's add).
        const group = await ledger.groupOf(prefix, batchId);
        if (group !== null && (await deps.jobs.hasJob(prefix, group))) return 'enqueued';
        if (!(await ledger.isPending(prefix, batchId))) return 'gone';
      } catch {
        return unavailable('queue unavailable (Redis)', true);
      }
      if (clock.now() - batchIdMs(batchId) > abandonedAfterMs) return 'abandoned';
      await clock.sleep(CONFIRM_POLL_MS);
    }
    return unavailable('an earlier push with this idempotency key is still being accepted', true);
  }

  /** Whether the batch's file is written (a one-key listing; store unreachable: unavailable). */
  async function written(ctx: PushContext, batchId: string): Promise<boolean | PushOutcome> {
    try {
      return await deps.files.exists(batchKey(deps.template, ctx.req.params, batchId));
    } catch {
      return unavailable('store unavailable', true);
    }
  }

  async function run(ctx: PushContext): Promise<StepResult<Claimed>> {
    for (let attempt = 1; ; attempt++) {
      const minted = await mint(ctx);
      if ('kind' in minted) return done(minted);
      const { batchId } = minted;
      if (minted.conflict) {
        return done({
          kind: 'conflict',
          batchId,
          reason: `Idempotency-Key "${ctx.req.idempotencyKey ?? ''}" was already used within the last ${deps.keyWindowSeconds} s for a different body (batch ${batchId}); this body was not stored. Send a new key for a new batch`,
        });
      }
      if (!minted.deduplicated) return next({ ...ctx, batchId, deduplicated: false, queued: false });
      const seen = await confirmEnqueued(ctx.prefix, batchId);
      if (typeof seen !== 'string') return done(seen);
      if (seen === 'enqueued') return next({ ...ctx, batchId, deduplicated: true, queued: true });
      // 'abandoned': the first push minted this id and died before enqueueing; the id still holds
      // its place in the ordering ledger, so enqueueing this retry's body under it keeps the
      // `?after=` promise, and the job id makes a late first enqueue a no-op.
      if (seen === 'abandoned') return next({ ...ctx, batchId, deduplicated: true, queued: false });
      // 'gone': not in flight and no job: written (and removed on completion), or minted by an API
      // that died before enqueueing and then reaped. Only the store can tell; a reaped id must not
      // be answered, or the client would stop retrying a batch that exists nowhere.
      const file = await written(ctx, batchId);
      if (typeof file !== 'boolean') return done(file);
      if (file) return done({ kind: 'duplicate', batchId, hash: ctx.req.hash, events: ctx.req.events });
      await bestEffort('push_release', ledger.release(ctx.prefix, batchId, ctx.claim), deps.bestEffort);
      if (attempt >= MINT_ATTEMPTS)
        return done(unavailable('an earlier push with this idempotency key was lost before it was queued', false));
    }
  }

  return { name: 'claim-id', run };
}
