import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { randomHex } from '../../ids.js';
import {
  DEFAULT_CONTENT_TYPE,
  type ByteRange,
  type ListOptions,
  type ObjectMeta,
  type ObjectStore,
  type PutOptions,
  type StoreLocation,
  type StoredObject,
} from '../types.js';
import { compareKeys, prefixCanMatchKeys, resolveListLimit, validateKey } from '../keys.js';
import { StarfishDocuments } from '../documents.js';

interface MemoryEntry {
  body: Uint8Array;
  sha256: string;
  contentType?: string;
}

/**
 * An `ObjectStore` held in a `Map`, for tests and local development only:
 * nothing survives the process. Bytes are copied on the way in and out so a
 * caller mutating its buffer can never change what is stored, matching the
 * isolation a real backend gives.
 */
export class MemoryObjectStore extends StarfishDocuments implements ObjectStore {
  private readonly objects = new Map<string, MemoryEntry>();
  /** Tells this store's URIs from another's (two memory stores in one process hold different objects). */
  private readonly rootUri = `memory://${randomHex(8)}/`;

  /** Stores a copy of `body` under `key`, replacing any earlier object. */
  async putBytes(key: string, body: Uint8Array, opts: PutOptions = {}): Promise<void> {
    validateKey(key);
    this.objects.set(key, entryOf(body, opts));
  }

  /**
   * Stores a copy of `body` under `key` unless an object is there. The check and the set run in
   * one turn of the event loop (no await between them), so of concurrent callers exactly one wins.
   */
  async createIfAbsent(key: string, body: Uint8Array, opts: PutOptions = {}): Promise<boolean> {
    validateKey(key);
    if (this.objects.has(key)) return false;
    this.objects.set(key, entryOf(body, opts));
    return true;
  }

  /** A copy of the object under `key`, or null. */
  async getBytes(key: string): Promise<StoredObject | null> {
    validateKey(key);
    const entry = this.objects.get(key);
    if (entry === undefined) return null;
    return { body: new Uint8Array(entry.body), contentType: entry.contentType ?? DEFAULT_CONTENT_TYPE };
  }

  /** Size, sha256 (computed at put) and content type of the object under `key`, or null. */
  async head(key: string): Promise<ObjectMeta | null> {
    validateKey(key);
    const entry = this.objects.get(key);
    if (entry === undefined) return null;
    const meta: ObjectMeta = { size: entry.body.byteLength, sha256: entry.sha256 };
    if (entry.contentType !== undefined) meta.contentType = entry.contentType;
    return meta;
  }

  /** A stream of a copy of the object (or of `range` of it), or null. */
  async getStream(key: string, range?: ByteRange): Promise<Readable | null> {
    validateKey(key);
    const entry = this.objects.get(key);
    if (entry === undefined) return null;
    const bytes = range === undefined ? entry.body : entry.body.subarray(range.start, range.end + 1);
    return Readable.from([Buffer.from(bytes)], { objectMode: false });
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

  /** A `memory://` URI of its own: no engine outside this store can open the objects. */
  location(): StoreLocation {
    return { kind: 'memory', rootUri: this.rootUri };
  }

  /** Nothing to release (the objects stay readable until the store is dropped). */
  async close(): Promise<void> {}
}

/** A stored copy of `body` with its sha256 and content type. */
function entryOf(body: Uint8Array, opts: PutOptions): MemoryEntry {
  const entry: MemoryEntry = { body: new Uint8Array(body), sha256: createHash('sha256').update(body).digest('hex') };
  if (opts.contentType !== undefined) entry.contentType = opts.contentType;
  return entry;
}
