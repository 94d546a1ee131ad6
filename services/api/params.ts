import { z } from 'zod';
import { ApiError } from './error-map.js';

/** The wire form of an integer query parameter: decimal digits only (no sign, exponent, fraction, space). */
const DIGITS = /^\d{1,15}$/;

/**
 * The one reader of integer query parameters (`limit` and the like) of every route, with the
 * parameter's schema (contract/schemas.ts, also what the OpenAPI document shows): absent → the
 * schema's default; decimal digits within the schema's range → the number; anything else (a
 * sign, an exponent, a repeated parameter) is a `bad_param` refusal naming the parameter and its range.
 */
export function queryInteger(schema: z.ZodDefault<z.ZodNumber>, name: string, raw: unknown): number {
  if (raw === undefined) return schema.parse(undefined);
  const parsed = typeof raw === 'string' && DIGITS.test(raw) ? schema.safeParse(Number(raw)) : null;
  if (!parsed?.success) {
    const { minValue, maxValue } = schema.unwrap();
    throw new ApiError('bad_param', `${name} must be an integer from ${minValue} to ${maxValue}`);
  }
  return parsed.data;
}

/** {@link queryInteger} with a range given as numbers. */
export function parseIntegerParam(
  raw: unknown,
  o: { name: string; min: number; max: number; fallback: number },
): number {
  return queryInteger(z.int().min(o.min).max(o.max).default(o.fallback), o.name, raw);
}
