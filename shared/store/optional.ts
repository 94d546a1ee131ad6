/**
 * What callers do when a store lacks an optional member of the contract (./types.ts): the
 * fallback, or an error that names the missing member, in one place.
 */
import { StoreError } from '../errors.js';
import type { CreateIfAbsent, ObjectStore } from './types.js';

/**
 * The store's conditional create as a function, or a non-retriable StoreError naming what is
 * missing: a feature whose correctness rests on "exactly one writer wins" (an Iceberg commit)
 * must not fall back to an overwriting put.
 */
export function requireCreateIfAbsent(store: ObjectStore, feature = 'an Iceberg commit'): CreateIfAbsent {
  if (typeof store.createIfAbsent !== 'function') {
    throw new StoreError(
      `${store.describe()} has no createIfAbsent (create a key only if absent): ${feature} needs one`,
      { retriable: false },
    );
  }
  return store.createIfAbsent.bind(store);
}

/** Closes the store when it has something to close (ObjectStore.close); a store without `close` holds nothing. */
export async function closeStore(store: ObjectStore): Promise<void> {
  await store.close?.();
}
