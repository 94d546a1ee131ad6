import { StepRunner, type StepTimer } from '../runner.js';
import type { PushRequest } from '../outcome.js';
import { shed } from './1-shed.js';
import { params } from './2-params.js';
import { headers } from './3-headers.js';
import { readBody } from './4-read-body.js';
import { envelope } from './5-envelope.js';
import { appBudget } from './6-app-budget.js';
import { pushRequestOf } from './request.js';
import type { AdmissionDeps, AdmissionInput, Admitting, Checked, Refused } from './types.js';

export type {
  AdmissionCode,
  AdmissionDeps,
  AdmissionInput,
  BodyRefusal,
  BodySource,
  ReadBody,
  Refused,
} from './types.js';
export { pushRequestOf } from './request.js';

/** A push admitted: the typed request for `accept`, and the body's size as sent (for the metrics). */
export interface Admitted {
  readonly kind: 'admitted';
  readonly request: PushRequest;
  readonly sentBytes: number;
}

/**
 * Everything a push passes before `PushService.accept`: shed → params → headers → read body →
 * envelope → app budget (./1-… to ./6-…), each refusing with a code or passing a typed request
 * on. Costs stay where they were: shedding and headers before a byte of the body is read, the
 * body within its limits, the budget it holds given back once the push is answered.
 */
export class Admission {
  private readonly steps: StepRunner<Admitting, Checked, Refused>;
  private readonly timer: StepTimer | undefined;

  constructor(private readonly deps: AdmissionDeps) {
    const observer = deps.observer;
    this.timer = observer?.stepSeconds && ((step, s) => observer.stepSeconds?.(step, s));
    this.steps = StepRunner.start<Admitting, Refused>()
      .then(shed(deps))
      .then(params(deps))
      .then(headers(deps))
      .then(readBody(deps))
      .then(envelope(deps))
      .then(appBudget(deps));
  }

  /** The steps' names, in the order they run. */
  get stepNames(): string[] {
    return this.steps.names;
  }

  /**
   * Runs the steps and hands their end (a refusal, or the admitted request) to `answer`; the
   * memory budget the push holds is given back once `answer` has settled, whatever happened.
   */
  async admit<T>(input: AdmissionInput, answer: (r: Refused | Admitted) => Promise<T>): Promise<T> {
    const held = { bytes: 0 };
    try {
      const r = await this.steps.run({ input, held }, this.timer);
      return await answer(r.kind === 'done' ? r.outcome : this.admitted(r.value));
    } finally {
      this.deps.inflightBudget?.give(held.bytes);
    }
  }

  private admitted(c: Checked): Admitted {
    const prefixParams = { ...c.params };
    delete prefixParams[this.deps.template.batchParam];
    const request = pushRequestOf({
      params: prefixParams,
      body: c.body.bytes,
      check: c.check,
      idempotencyKey: c.idempotencyKey,
      hash: c.body.hash,
      decodedHash: c.body.decodedHash,
    });
    return { kind: 'admitted', request, sentBytes: c.body.sentBytes };
  }
}
