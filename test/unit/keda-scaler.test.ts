import { describe, expect, it } from 'vitest';
import { KedaHpaModel, type ScaleRule } from '../helpers/keda-scaler.js';

/** The rule test/integration/encoder-autoscale.test.ts runs against real processes, checked alone. */
const RULE: ScaleRule = {
  minReplicas: 0,
  maxReplicas: 3,
  target: 10,
  activationTarget: 0,
  pollingMs: 2000,
  cooldownMs: 6000,
  stabilizationMs: 8000,
};

describe('KedaHpaModel (KEDA + HPA, AverageValue)', () => {
  it('activates from 0 to max(min, 1) above the activation target, then follows ceil(metric / target) up to max at once', () => {
    const m = new KedaHpaModel(RULE);
    expect(m.decide(0, 0, 0)).toEqual({ desired: 0, reason: 'idle' });
    expect(m.decide(2000, 5, 0)).toEqual({ desired: 1, reason: 'activate' });
    expect(m.decide(4000, 25, 1)).toEqual({ desired: 3, reason: 'hpa' });
    expect(m.decide(6000, 500, 3)).toEqual({ desired: 3, reason: 'hpa' });
  });

  it('keeps the replicas within the 10% tolerance', () => {
    const m = new KedaHpaModel({ ...RULE, minReplicas: 1 });
    expect(m.decide(0, 21, 2).desired).toBe(2);
    expect(m.decide(2000, 19, 2).desired).toBe(2);
    expect(m.decide(4000, 23, 2).desired).toBe(3);
  });

  it('scales down only to the highest recommendation of the stabilization window', () => {
    const m = new KedaHpaModel({ ...RULE, minReplicas: 1 });
    expect(m.decide(0, 30, 3).desired).toBe(3);
    expect(m.decide(2000, 0, 3)).toEqual({ desired: 3, reason: 'stabilized' });
    expect(m.decide(6000, 0, 3)).toEqual({ desired: 3, reason: 'stabilized' });
    // The 30 was recommended at 0 ms: out of the 8 s window at 8,001 ms.
    expect(m.decide(8001, 0, 3)).toEqual({ desired: 1, reason: 'hpa' });
    // minReplicas 1: never below it, however long it is idle.
    expect(m.decide(60_000, 0, 1).desired).toBe(1);
  });

  it('with minReplicas 0, goes to 0 once no poll was active for cooldownPeriod', () => {
    const m = new KedaHpaModel(RULE);
    expect(m.decide(0, 12, 1).desired).toBe(2);
    expect(m.decide(2000, 0, 2).desired).toBe(2);
    expect(m.decide(5999, 0, 2).desired).toBe(2);
    expect(m.decide(6000, 0, 2)).toEqual({ desired: 0, reason: 'to-zero' });
    expect(m.decide(8000, 0, 0)).toEqual({ desired: 0, reason: 'idle' });
  });
});
