import type { Queue } from 'bullmq';
import {
  type CollectionConfig,
  DEFAULT_BODY_DEDUP_WINDOW_SECONDS,
  DEFAULT_IDEMPOTENCY_WINDOW_SECONDS,
  isJsonMimeType,
} from '../../shared/config.js';
import type { BestEffortSink } from '../../shared/best-effort.js';
import { parseBatchRef } from '../../shared/ids.js';
import type { BatchLedger } from '../../shared/ledger/ledger.js';
import { MemoryLedger } from '../../shared/ledger/memory.js';
import {
  PARQUET_COMPRESSION_DEFAULT,
  PARQUET_MIME_TYPE,
  type ParquetCompression,
  type PreparedBatch,
} from '../../shared/parquet/encode.js';
import type { ParquetEncodeThread } from '../../shared/parquet/encode-thread-pool.js';
import { type StoragePathTemplate, batchKey, parseStoragePath } from '../../shared/paths.js';
import { API_ENCODE_MIN_BYTES } from '../../shared/redis/jobs/push.js';
import type { ObjectStore, StoredObject } from '../../shared/store/types.js';
import type { ShardSet } from '../../shared/ledger/shard-set.js';
import { BatchLister, type ListIndex, type ListResult } from './list/batch-lister.js';
import { BullJobSink, redisLedger, routeOf, storeFiles } from './push/adapters.js';
import type { PushObserver } from './push/context.js';
import { outcomeError } from './error-map.js';
import { pushRequestOf } from './push/admission/request.js';
import { InlinePush } from './push/inline.js';
import type { PushOutcome, PushRequest, Unavailable } from './push/outcome.js';
import { PushService } from './push/service.js';

export { PARQUET_MIME_TYPE };
export type { ListResult };

/** Where accepted batches go: a BullMQ queue plus the Redis ledger that mints ids. */
export interface QueueBinding {
  queue: Queue;
  ledger: BatchLedger;
  /**
   * QUEUE_SHARDS queues (and REDIS_WAIT_REPLICAS): each list prefix goes to its shard's queue and
   * ledger instead of `queue`/`ledger`, and a push is answered only once its shard's node has
   * replicated it.
   */
  shards?: ShardSet;
  /**
   * A push with an Idempotency-Key seen within this window gets the first answer (same body) or
   * 422 (other body). 0 disables. Default 3600.
   */
  idempotencyWindowSeconds?: number;
  /** A push without a key whose body is byte-identical to one within this window gets the first answer. 0 disables. Default 300. */
  bodyDedupWindowSeconds?: number;
  /** A push whose enqueue has not finished by then answers 503 (default 3000 ms). */
  enqueueTimeoutMs?: number;
  /**
   * Pushes that are ready while an add to their queue runs go together as one group job
   * (`BatchGroupJobSchema`) of up to this many batches, each still its own id and file. Default 1:
   * one job per push, so an encoder of your own that reads `BatchJobSchema` keeps working; the
   * services pass `QUEUE_GROUP_MAX` (default 16), and their encoder reads both.
   */
  groupMax?: number;
  /**
   * Bodies from API_ENCODE_MIN_BYTES (128 KiB) up to this many bytes are encoded to their Parquet
   * file here, once the batch id is minted, and the job carries the file: the body is scanned
   * once (the check is that scan), and the encoder only writes. 0 (the default): the encoder
   * encodes every batch. The services pass `API_ENCODE_MAX_BYTES` (default 1 MiB).
   */
  encodeMaxBytes?: number;
  /**
   * Where those files are encoded: a worker thread (the services pass one, started on the first
   * such push), so parquet-wasm does not hold the event loop. Without it, on the event loop.
   */
  encodeThread?: () => ParquetEncodeThread;
}

export interface EventsPluginOptions {
  store: ObjectStore;
  /** Collection name, or its config (then its MIME types and encryption are checked too). */
  collection: string | CollectionConfig;
  storagePath: string;
  /** Without a queue the plugin encodes inside the push (single process, no Redis). */
  queue?: QueueBinding;
  /**
   * The codec of the batch files this plugin encodes (inline, or the API's own encode of large
   * bodies). Default: the collection config's `parquetCompression`, else PARQUET_COMPRESSION_DEFAULT.
   * Give an encoder of the same collection the same setting (the services read both from the config).
   */
  parquetCompression?: ParquetCompression;
  /** Where a failed give-back of a batch id is logged and counted (`push_release`); default: nowhere (the reaper repairs it). */
  bestEffort?: BestEffortSink;
  /** Observers for metrics; all optional. */
  observe?: PushObserver & {
    /** Batches in a group job just added (groups of two or more only). */
    groupSize?(batches: number): void;
  };
}

export interface PushResult {
  hash: string;
  batchId: string | null;
  events: number;
  deduplicated: boolean;
}

/** The events plugin the sync router serves a collection with. */
export interface EventsServerPlugin {
  readonly name: 'events';
  readonly collection: string;
  readonly template: StoragePathTemplate;
  readonly store: ObjectStore;
  readonly mode: 'queue' | 'inline';
  /**
   * Whether a (decoded) body of this size is to be prepared with `prepareBatch` instead of
   * checked with `checkEnvelope`: the plugin then encodes its Parquet file itself.
   */
  encodesBody(bytes: number): boolean;
  /** The push path: a checked push's typed outcome (the HTTP layer's error map, error-map.ts, gives its status). */
  accept(request: PushRequest): Promise<PushOutcome>;
  /**
   * `opts.hash`: sha256 hex of the body as sent, when `body` is its decoded form (Content-Encoding);
   * default sha256(body). It is the answer's `hash`; idempotency compares `opts.decodedHash`
   * (sha256 of `body`, computed here when not given), so the same JSON coded another way is the
   * same body. `validated.prepared`: the body scanned by `prepareBatch` (for a size
   * `encodesBody` accepts); without it a queued batch carries its JSON.
   * `validated.everyEventHasMessageId` (the scan's): a push without a key is deduplicated by its
   * body only when true (absent: false), since two devices may send the same body.
   */
  push(
    params: Readonly<Record<string, string>>,
    body: Buffer,
    validated: { text: string; events: number; prepared?: PreparedBatch; everyEventHasMessageId?: boolean },
    opts?: { idempotencyKey?: string; hash?: string; decodedHash?: string },
  ): Promise<PushResult>;
  /**
   * True when `idempotencyKey` is already claimed for this prefix within its window, so `push`
   * with it stores nothing new: it gets the first answer (same decoded body) or 422 (another
   * body). Read-only; the router asks before charging the per-app events budget. Always false
   * without a queue or with the window off. Redis unreachable: 503.
   */
  idempotencyClaimed(
    params: Readonly<Record<string, string>>,
    idempotencyKey: string,
    decodedHash: string,
  ): Promise<boolean>;
  /** {@link idempotencyClaimed} with an unreachable Redis as a typed outcome instead of an error (what admission asks). */
  keyClaimed(
    params: Readonly<Record<string, string>>,
    idempotencyKey: string,
    decodedHash: string,
  ): Promise<boolean | Unavailable>;
  list(params: Readonly<Record<string, string>>, after: string | undefined, limit: number): Promise<ListResult>;
  pull(params: Readonly<Record<string, string>>, ref: string): Promise<(StoredObject & { batchId: string }) | null>;
}

/** The push path of a plugin: queued (PushService over Redis and BullMQ) or inline (no Redis). */
function pushPathOf(
  opts: EventsPluginOptions,
  collection: string,
  template: StoragePathTemplate,
  inlineLedger: MemoryLedger | null,
): PushService | InlinePush {
  const { store, queue } = opts;
  const compression =
    opts.parquetCompression ??
    (typeof opts.collection === 'string' ? undefined : opts.collection.parquetCompression) ??
    PARQUET_COMPRESSION_DEFAULT;
  if (!queue) return new InlinePush({ template, store, ledger: inlineLedger as MemoryLedger, compression });
  const observe = opts.observe ?? {};
  return new PushService({
    collection,
    template,
    ledger: redisLedger(queue),
    jobs: new BullJobSink(queue, { groupMax: queue.groupMax ?? 1, groupSize: observe.groupSize }),
    files: storeFiles(store),
    keyWindowSeconds: queue.idempotencyWindowSeconds ?? DEFAULT_IDEMPOTENCY_WINDOW_SECONDS,
    bodyWindowSeconds: queue.bodyDedupWindowSeconds ?? DEFAULT_BODY_DEDUP_WINDOW_SECONDS,
    enqueueTimeoutMs: queue.enqueueTimeoutMs ?? 3000,
    encodeThread: queue.encodeThread,
    compression,
    observe,
    bestEffort: opts.bestEffort,
  });
}

/** The list's watermark: the Redis ledger of each prefix's shard, or the inline ledger. */
function listIndexOf(queue: QueueBinding | undefined, inlineLedger: MemoryLedger | null): ListIndex {
  if (!queue) return { listBound: (prefix) => (inlineLedger as MemoryLedger).listBound(prefix) };
  const route = routeOf(queue);
  return {
    listWritten: (prefix, after, count) => route(prefix).ledger.listWritten(prefix, after, count),
    listBound: (prefix) => route(prefix).ledger.listBound(prefix),
  };
}

/**
 * Builds the events plugin. Throws when the store cannot write bytes, the storagePath does
 * not end with a `{param}`, or the collection config is not a JSON-typed, unencrypted one.
 */
export function createEventsServerPlugin(opts: EventsPluginOptions): EventsServerPlugin {
  const { store, storagePath, queue } = opts;
  if (
    !store ||
    typeof store.putBytes !== 'function' ||
    typeof store.getBytes !== 'function' ||
    typeof store.listKeys !== 'function'
  ) {
    throw new Error('events plugin: the store must implement putBytes, getBytes and listKeys');
  }
  const template = parseStoragePath(storagePath);
  const collection = typeof opts.collection === 'string' ? opts.collection : opts.collection.name;
  if (typeof opts.collection !== 'string') {
    const c = opts.collection;
    if (!c.allowedMimeTypes.every(isJsonMimeType)) {
      throw new Error(
        `events plugin: collection "${collection}" must be JSON-typed (allowedMimeTypes ["application/json"])`,
      );
    }
    if (c.encryption !== 'none')
      throw new Error(`events plugin: collection "${collection}" must have encryption "none"`);
  }
  const inlineLedger = queue ? null : new MemoryLedger();
  const pushPath = pushPathOf(opts, collection, template, inlineLedger);
  const lister = new BatchLister({ store, template, index: listIndexOf(queue, inlineLedger) });
  const encodeMaxBytes = queue?.encodeMaxBytes ?? 0;
  const keyClaimed: EventsServerPlugin['keyClaimed'] = async (params, key, decodedHash) =>
    pushPath instanceof PushService ? pushPath.keyClaimed(params, key, decodedHash) : false;

  return {
    name: 'events',
    collection,
    template,
    store,
    mode: queue ? 'queue' : 'inline',

    encodesBody: (bytes) => encodeMaxBytes > 0 && bytes >= API_ENCODE_MIN_BYTES && bytes <= encodeMaxBytes,

    accept: (request) => pushPath.accept(request),

    async push(params, body, validated, pushOpts = {}) {
      const outcome = await pushPath.accept(pushRequestOf({ params, body, check: validated, ...pushOpts }));
      const result = pushResultOf(outcome);
      if (!result) throw outcomeError(outcome);
      return result;
    },

    keyClaimed,

    async idempotencyClaimed(params, idempotencyKey, decodedHash) {
      const claimed = await keyClaimed(params, idempotencyKey, decodedHash);
      if (typeof claimed !== 'boolean') throw outcomeError(claimed);
      return claimed;
    },

    async list(params, after, limit) {
      const r = await lister.list(params, after, limit);
      if ('kind' in r) throw outcomeError(r);
      return r;
    },

    async pull(params, ref) {
      const batchId = parseBatchRef(ref);
      if (!batchId) return null;
      const obj = await store.getBytes(batchKey(template, params, batchId));
      return obj ? { ...obj, batchId } : null;
    },
  };
}

/** A success outcome as the plugin's `push` answers it; null for any other outcome. */
export function pushResultOf(outcome: PushOutcome): PushResult | null {
  switch (outcome.kind) {
    case 'accepted':
    case 'duplicate':
      return {
        hash: outcome.hash,
        batchId: outcome.batchId,
        events: outcome.events,
        deduplicated: outcome.kind === 'duplicate',
      };
    case 'empty':
      return { hash: outcome.hash, batchId: null, events: 0, deduplicated: false };
    default:
      return null;
  }
}
