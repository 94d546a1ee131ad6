import { ApiError } from './error-map.js';

/**
 * The one parser of integer query parameters (`limit` and the like) of every route: decimal
 * digits only (no sign, exponent, fraction, space or repeated parameter), within `[min, max]`;
 * absent → `fallback`. Anything else is a `bad_param` refusal naming the parameter and its range.
 */
export function parseIntegerParam(raw: unknown, o: { name: string; min: number; max: number; fallback: number }): number {
  if (raw === undefined) return o.fallback;
  const n = typeof raw === 'string' && /^\d{1,15}$/.test(raw) ? Number(raw) : NaN;
  if (!(n >= o.min && n <= o.max)) throw new ApiError('bad_param', `${o.name} must be an integer from ${o.min} to ${o.max}`);
  return n;
}
