import type { RenderedScaledObject } from './helm.js';

/**
 * The replica rule a KEDA ScaledObject (scalingModifiers, metricType AverageValue) and the HPA it
 * makes apply, as numbers read from a rendered ScaledObject; the autoscale test runs it in a loop
 * against real processes in place of a cluster.
 */
export interface ScaleRule {
  minReplicas: number;
  maxReplicas: number;
  /** scalingModifiers.target: the metric per replica. */
  target: number;
  /** scalingModifiers.activationTarget: above it the ScaledObject is active. */
  activationTarget: number;
  /** KEDA's pollingInterval. */
  pollingMs: number;
  /** KEDA's cooldownPeriod: only the step to 0 (minReplicas 0) waits for it. */
  cooldownMs: number;
  /** The HPA's scale-down stabilization window (its default, 300 s, when the object sets none). */
  stabilizationMs: number;
}

/** The HPA's default tolerance: no change while the metric is within 10% of target × replicas. */
const HPA_TOLERANCE = 0.1;
const HPA_DEFAULT_STABILIZATION_S = 300;
/** KEDA's defaults for fields the object leaves out. */
const KEDA_DEFAULT_POLLING_S = 30;
const KEDA_DEFAULT_COOLDOWN_S = 300;

/** The rule of a rendered ScaledObject (its Redis form: scalingModifiers with a target). */
export function scaleRuleOf(so: RenderedScaledObject): ScaleRule {
  const s = so.spec;
  const mods = s.advanced.scalingModifiers;
  if ((mods.metricType ?? 'AverageValue') !== 'AverageValue')
    throw new Error(`metricType ${String(mods.metricType)}: only AverageValue is modelled`);
  return {
    minReplicas: s.minReplicaCount ?? 0,
    maxReplicas: s.maxReplicaCount ?? 100,
    target: Number(mods.target),
    activationTarget: Number(mods.activationTarget ?? 0),
    pollingMs: (s.pollingInterval ?? KEDA_DEFAULT_POLLING_S) * 1000,
    cooldownMs: (s.cooldownPeriod ?? KEDA_DEFAULT_COOLDOWN_S) * 1000,
    stabilizationMs:
      (s.advanced.horizontalPodAutoscalerConfig?.behavior?.scaleDown?.stabilizationWindowSeconds ??
        HPA_DEFAULT_STABILIZATION_S) * 1000,
  };
}

/** One decision and why, for the test's log. */
export interface ScaleDecision {
  desired: number;
  reason: 'activate' | 'to-zero' | 'idle' | 'hpa' | 'tolerance' | 'stabilized';
}

/**
 * KEDA + HPA for one ScaledObject, decided at each poll:
 * - at 0 replicas KEDA activates to max(minReplicas, 1) once the metric exceeds activationTarget;
 * - with minReplicas 0, KEDA scales to 0 once no poll has been active for cooldownPeriod;
 * - otherwise the HPA: ceil(metric / target) within [max(minReplicas, 1), maxReplicas], no change
 *   within its 10% tolerance, up at once, down to the highest recommendation of the
 *   stabilization window. (The HPA's default scale-up policies, +100% or +4 pods per 15 s, never
 *   bind below 5 replicas; the test stays below.)
 */
export class KedaHpaModel {
  private lastActiveAt = Number.NEGATIVE_INFINITY;
  private readonly recommendations: { at: number; replicas: number }[] = [];

  constructor(readonly rule: ScaleRule) {}

  decide(now: number, metric: number, current: number): ScaleDecision {
    const r = this.rule;
    const active = metric > r.activationTarget;
    if (active) this.lastActiveAt = now;
    if (current === 0)
      return { desired: active ? Math.max(r.minReplicas, 1) : 0, reason: active ? 'activate' : 'idle' };
    if (!active && r.minReplicas === 0 && now - this.lastActiveAt >= r.cooldownMs) {
      this.recommendations.length = 0;
      return { desired: 0, reason: 'to-zero' };
    }
    const hpaMin = Math.max(r.minReplicas, 1);
    const ratio = metric / (r.target * current);
    const withinTolerance = Math.abs(ratio - 1) <= HPA_TOLERANCE;
    const raw = withinTolerance ? current : Math.min(r.maxReplicas, Math.max(hpaMin, Math.ceil(metric / r.target)));
    this.recommendations.push({ at: now, replicas: raw });
    while ((this.recommendations[0]?.at ?? now) < now - r.stabilizationMs) this.recommendations.shift();
    if (raw >= current) return { desired: raw, reason: withinTolerance ? 'tolerance' : 'hpa' };
    const highest = Math.max(...this.recommendations.map((x) => x.replicas));
    const desired = Math.min(current, highest);
    return { desired, reason: desired === raw ? 'hpa' : 'stabilized' };
  }
}
