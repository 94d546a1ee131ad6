/** Option parsers shared by the CLI's commands. */
import { InvalidArgumentError } from 'commander';

/** Commander parser of an integer option from `min` to `max` (digits only: no sign, no exponent). */
export function intOption(min: number, max: number): (raw: string) => number {
  return (raw) => {
    if (!/^\d{1,9}$/.test(raw)) throw new InvalidArgumentError(`must be an integer from ${min} to ${max}`);
    const n = Number(raw);
    if (n < min || n > max) throw new InvalidArgumentError(`must be an integer from ${min} to ${max}`);
    return n;
  };
}
