import type { PutOptions, StoredObject } from './types.js';

/** Options Starfish's document `put` passes (its `ObjectStore`); `cacheControl` is not stored. */
export interface DocumentPutOptions {
  contentType?: string;
  cacheControl?: string;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The document half of Starfish's `ObjectStore` (`getString`, `put`, `delete`, `deleteMany`) over
 * a store's bytes, so one store can back our router (events collections) and a Starfish router
 * mounted after it (every other collection: docs/starfish.md). A document is a UTF-8 object like
 * any other key; nothing here is used by the events pipeline itself.
 */
export abstract class StarfishDocuments {
  abstract putBytes(key: string, body: Uint8Array, opts?: PutOptions): Promise<void>;
  abstract getBytes(key: string): Promise<StoredObject | null>;
  abstract deleteKeys(keys: readonly string[]): Promise<void>;

  /** The object under `key` as UTF-8 text, or null. Bytes that are not UTF-8 throw (never a lossy string). */
  async getString(key: string): Promise<string | null> {
    const object = await this.getBytes(key);
    return object === null ? null : utf8.decode(object.body);
  }

  /** Writes `body` as UTF-8 (content type as given, `application/json` by default). */
  async put(key: string, body: string, opts: DocumentPutOptions = {}): Promise<void> {
    await this.putBytes(key, Buffer.from(body, 'utf8'), { contentType: opts.contentType ?? 'application/json' });
  }

  /** Deletes `key` (a missing key is not an error). */
  delete(key: string): Promise<void> {
    return this.deleteKeys([key]);
  }

  /** Deletes every key of `keys` (a missing key is not an error). */
  deleteMany(keys: string[]): Promise<void> {
    return this.deleteKeys(keys);
  }
}
