import type { BestEffortSink } from '../../../shared/best-effort.js';
import type { IdempotencyClaim } from '../../../shared/ledger/ledger.js';
import { listPrefix } from '../../../shared/paths.js';
import type { PushContext, PushDeps, PushObserver } from './context.js';
import { type PushOutcome, type PushRequest, type Unavailable, unavailable } from './outcome.js';
import { type Clock, systemClock } from './ports.js';
import { StepRunner, type StepTimer } from './runner.js';
import { claimId } from './steps/1-claim-id.js';
import { buildPayload } from './steps/2-build-payload.js';
import { enqueue } from './steps/3-enqueue.js';
import { durabilityWait } from './steps/4-durability-wait.js';

export type PushServiceOptions = Omit<PushDeps, 'clock' | 'observe' | 'bestEffort'> & {
  clock?: Clock;
  observe?: PushObserver;
  bestEffort?: BestEffortSink;
};

/**
 * The queued push path: claim id → build payload → enqueue → durability wait (./steps/), over
 * injected ports. It answers a typed outcome and knows nothing of HTTP; the router maps outcomes
 * to statuses (./http.ts).
 */
export class PushService {
  private readonly deps: PushDeps;
  private readonly steps: StepRunner<PushContext, PushOutcome>;
  private readonly timer: StepTimer | undefined;

  constructor(opts: PushServiceOptions) {
    this.deps = {
      ...opts,
      clock: opts.clock ?? systemClock,
      observe: opts.observe ?? {},
      bestEffort: opts.bestEffort ?? {},
    };
    this.steps = StepRunner.start<PushContext>()
      .then(claimId(this.deps))
      .then(buildPayload(this.deps))
      .then(enqueue(this.deps))
      .then(durabilityWait(this.deps));
    const observe = this.deps.observe;
    this.timer = observe.stepSeconds && ((step, s) => observe.stepSeconds?.(step, s));
  }

  /** The steps' names, in the order they run. */
  get stepNames(): string[] {
    return this.steps.names;
  }

  async accept(req: PushRequest): Promise<PushOutcome> {
    if (req.events === 0) return { kind: 'empty', hash: req.hash };
    const prefix = listPrefix(this.deps.template, req.params);
    const r = await this.steps.run({ req, prefix, claim: this.claimOf(prefix, req) }, this.timer);
    return r.kind === 'done' ? r.outcome : r.value;
  }

  /**
   * True when the Idempotency-Key is claimed for this prefix within its window, so `accept` with
   * it stores nothing new (the first answer, or a conflict). Read-only; false with the window off.
   */
  async keyClaimed(
    params: Readonly<Record<string, string>>,
    key: string,
    decodedHash: string,
  ): Promise<boolean | Unavailable> {
    if (this.deps.keyWindowSeconds <= 0) return false;
    const prefix = listPrefix(this.deps.template, params);
    try {
      return (
        (await this.deps.clock.within(
          this.deps.ledger.lookup(prefix, this.keyClaim(prefix, key, decodedHash)),
          this.deps.enqueueTimeoutMs,
          'idempotency lookup',
        )) !== null
      );
    } catch {
      return unavailable('queue unavailable (Redis)', false);
    }
  }

  private keyClaim(prefix: string, key: string, decodedHash: string): IdempotencyClaim {
    return {
      family: 'key',
      scope: `${this.deps.collection}\n${prefix}\n${key}`,
      bodyHash: decodedHash,
      windowSeconds: this.deps.keyWindowSeconds,
    };
  }

  /**
   * The keyed claim's scope holds the key, not the body: the same key with another body is a
   * conflict (Stripe's rule), never a silent merge. Without a key only a byte-identical body
   * within the short retry window counts as a retry, and only when every event carries a
   * message_id: two devices sending the same heartbeat are two batches, not one.
   */
  private claimOf(prefix: string, req: PushRequest): IdempotencyClaim | undefined {
    if (req.idempotencyKey !== undefined) return this.keyClaim(prefix, req.idempotencyKey, req.decodedHash);
    if (this.deps.bodyWindowSeconds > 0 && req.everyEventHasMessageId) {
      return {
        family: 'body',
        scope: `${this.deps.collection}\n${prefix}\n${req.decodedHash}`,
        bodyHash: req.decodedHash,
        windowSeconds: this.deps.bodyWindowSeconds,
      };
    }
    return undefined;
  }
}
