import { StoreError } from '../errors.js';

/**
 * Refuses a constructor option the store does not know. Options are plain objects written by
 * hand (often copied from another server's docs): a misspelt or foreign option silently ignored
 * fails later, far from its cause (credentials that were never applied), so it fails here,
 * naming the option and the ones that are known.
 */
export function checkOptionNames(store: string, opts: object, known: readonly string[]): void {
  if (typeof opts !== 'object' || opts === null) {
    throw new StoreError(`${store} options must be an object`, { retriable: false });
  }
  const unknown = Object.keys(opts).filter((k) => !known.includes(k));
  if (unknown.length > 0) {
    const names = unknown.map((k) => JSON.stringify(k)).join(', ');
    throw new StoreError(
      `${store}: unknown option${unknown.length > 1 ? 's' : ''} ${names}; known options are ${known.join(', ')}`,
      { retriable: false },
    );
  }
}
