import type { ListOptions, ObjectStore, PutOptions, StoredObject } from './types.js';
import { compareKeys, prefixCanMatchKeys, resolveListLimit, validateKey } from './keys.js';

interface MemoryEntry {
  body: Uint8Array;
  contentType?: string;
}

/**
 * An `ObjectStore` held in a `Map`, for tests and local development only:
 * nothing survives the process. Bytes are copied on the way in and out so a
 * caller mutating its buffer can never change what is stored, matching the
 * isolation a real backend gives.
 */
export class MemoryObjectStore implements ObjectStore {
  private readonly objects = new Map<string, MemoryEntry>();

  /** Stores a copy of `body` under `key`, replacing any earlier object. */
  async putBytes(key: string, body: Uint8Array, opts: PutOptions = {}): Promise<void> {
    validateKey(key);
    const entry: MemoryEntry = { body: new Uint8Array(body) };
    if (opts.contentType !== undefined) entry.contentType = opts.contentType;
    this.objects.set(key, entry);
  }

  /** A copy of the object under `key`, or null. */
  async getBytes(key: string): Promise<StoredObject | null> {
    validateKey(key);
    const entry = this.objects.get(key);
    if (entry === undefined) return null;
    const result: StoredObject = { body: new Uint8Array(entry.body) };
    if (entry.contentType !== undefined) result.contentType = entry.contentType;
    return result;
  }

  /** Keys starting with `prefix`, in UTF-8 byte order; a full scan, which is fine at test sizes. */
  async listKeys(prefix: string, opts: ListOptions = {}): Promise<string[]> {
    const limit = resolveListLimit(opts.limit);
    if (limit === 0 || !prefixCanMatchKeys(prefix)) return [];
    const { startAfter } = opts;
    const keys: string[] = [];
    for (const key of this.objects.keys()) {
      if (!key.startsWith(prefix)) continue;
      if (startAfter !== undefined && compareKeys(key, startAfter) <= 0) continue;
      keys.push(key);
    }
    keys.sort(compareKeys);
    return keys.length > limit ? keys.slice(0, limit) : keys;
  }

  /** Removes `keys`; missing ones are ignored. */
  async deleteKeys(keys: readonly string[]): Promise<void> {
    for (const key of keys) validateKey(key);
    for (const key of keys) this.objects.delete(key);
  }

  /** Always healthy: there is nothing to reach. */
  async healthcheck(): Promise<void> {}

  describe(): string {
    return 'memory';
  }
}
