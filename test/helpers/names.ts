import { randomBytes } from 'node:crypto';

/** A queue name / key namespace no other test uses. */
export function uniqueName(label: string): string {
  return `t-${label}-${randomBytes(4).toString('hex')}`;
}
