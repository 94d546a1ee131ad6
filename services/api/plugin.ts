import { createHash } from 'node:crypto';
import type { Queue } from 'bullmq';
import { type CollectionConfig, DEFAULT_BODY_DEDUP_WINDOW_SECONDS, DEFAULT_IDEMPOTENCY_WINDOW_SECONDS, isJsonMimeType } from '../../shared/config.js';
import { HttpError, StoreError } from '../../shared/errors.js';
import { batchIdMs, isBatchId, parseBatchRef } from '../../shared/ids.js';
import { type BatchLedger, type IdempotencyClaim, type ListBound, visibleUnder } from '../../shared/ledger/ledger.js';
import { MemoryLedger } from '../../shared/ledger/memory.js';
import { PARQUET_MIME_TYPE, type PreparedBatch, encodeBatch } from '../../shared/parquet/encode.js';
import type { ParquetEncodeThread } from '../../shared/parquet/encode-thread-pool.js';
import { commandNeverRan } from '../../shared/redis.js';
import { withTimeout } from '../../shared/timeout.js';
import { type StoragePathTemplate, batchKey, listPrefix, parseStoragePath } from '../../shared/paths.js';
import { API_ENCODE_MIN_BYTES, BATCH_JOB_OPTIONS, type BatchGroupJob, type BatchJob, GROUP_MAX_BODY_BYTES, JOB_NAME, groupJobId, packBody, packParquet } from '../../shared/queue.js';
import { GroupCommitter, type GroupTicket } from '../../shared/group-commit.js';
import type { ObjectStore, StoredObject } from '../../shared/store/types.js';
import type { Shard, ShardSet } from '../../shared/shards.js';

export { PARQUET_MIME_TYPE };

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
  /** Observers for metrics; all optional. */
  observe?: {
    mintSeconds?(s: number): void;
    enqueueSeconds?(s: number): void;
    /** Roughly the bytes a job just added to Redis (packed body and job fields). */
    enqueuedBytes?(bytes: number): void;
    /** Batches in a group job just added (groups of two or more only). */
    groupSize?(batches: number): void;
    /** A push answered 503 whose add went out but did not answer in time (it may still land; its id stays in flight). */
    enqueueUnknown?(): void;
    /** Time to turn a prepared body into its Parquet file (encodeMaxBytes). */
    encodeSeconds?(s: number): void;
    /** A prepared body whose encode failed here: its batch goes as JSON, for an encoder to encode. */
    encodeFailed?(err: Error): void;
  };
}

export interface PushResult {
  hash: string;
  batchId: string | null;
  events: number;
  deduplicated: boolean;
}

export interface ListResult {
  items: string[];
  hasMore: boolean;
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
  /**
   * `opts.hash`: sha256 hex of the body as sent, when `body` is its decoded form (Content-Encoding);
   * default sha256(body). It is the answer's `hash`; idempotency compares `opts.decodedHash`
   * (sha256 of `body`, computed here when not given), so the same JSON coded another way is the
   * same body. `validated.prepared`: the body scanned by `prepareBatch` (for a size
   * `encodesBody` accepts); without it a queued batch carries its JSON.
   * `validated.everyEventHasMessageId` (the scan's): a push without a key is deduplicated by its
   * body only when true (absent: false), since two devices may send the same body.
   */
  push(params: Readonly<Record<string, string>>, body: Buffer, validated: { text: string; events: number; prepared?: PreparedBatch; everyEventHasMessageId?: boolean }, opts?: { idempotencyKey?: string; hash?: string; decodedHash?: string }): Promise<PushResult>;
  /**
   * True when `idempotencyKey` is already claimed for this prefix within its window, so `push`
   * with it stores nothing new: it gets the first answer (same decoded body) or 422 (another
   * body). Read-only; the router asks before charging the per-app events budget. Always false
   * without a queue or with the window off. Redis unreachable: 503.
   */
  idempotencyClaimed(params: Readonly<Record<string, string>>, idempotencyKey: string, decodedHash: string): Promise<boolean>;
  list(params: Readonly<Record<string, string>>, after: string | undefined, limit: number): Promise<ListResult>;
  pull(params: Readonly<Record<string, string>>, ref: string): Promise<(StoredObject & { batchId: string }) | null>;
}

function sha256Hex(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/**
 * What one enqueued job holds in Redis besides its packed body: the job hash's other fields, its
 * entries in the BullMQ events stream and the ledger (about 1 KB measured by the soak; doubled).
 */
const JOB_OVERHEAD_BYTES = 2048;

const unavailable = (what: string): HttpError => new HttpError(503, `${what}; retry later`, { 'Retry-After': '1' });

/**
 * Builds the events plugin. Throws when the store cannot write bytes, the storagePath does
 * not end with a `{param}`, or the collection config is not a JSON-typed, unencrypted one.
 */
export function createEventsServerPlugin(opts: EventsPluginOptions): EventsServerPlugin {
  const { store, storagePath, queue } = opts;
  if (!store || typeof store.putBytes !== 'function' || typeof store.getBytes !== 'function' || typeof store.listKeys !== 'function') {
    throw new Error('events plugin: the store must implement putBytes, getBytes and listKeys');
  }
  const template = parseStoragePath(storagePath);
  const collection = typeof opts.collection === 'string' ? opts.collection : opts.collection.name;
  if (typeof opts.collection !== 'string') {
    const c = opts.collection;
    if (!c.allowedMimeTypes.every(isJsonMimeType)) {
      throw new Error(`events plugin: collection "${collection}" must be JSON-typed (allowedMimeTypes ["application/json"])`);
    }
    if (c.encryption !== 'none') throw new Error(`events plugin: collection "${collection}" must have encryption "none"`);
  }
  const inlineLedger = queue ? null : new MemoryLedger();
  const keyWindowSeconds = queue?.idempotencyWindowSeconds ?? DEFAULT_IDEMPOTENCY_WINDOW_SECONDS;
  const bodyWindowSeconds = queue?.bodyDedupWindowSeconds ?? DEFAULT_BODY_DEDUP_WINDOW_SECONDS;
  const enqueueTimeoutMs = queue?.enqueueTimeoutMs ?? 3000;
  const groupMax = queue?.groupMax ?? 1;
  const encodeMaxBytes = queue?.encodeMaxBytes ?? 0;
  /** One group committer per queue (shard), created on its first push. */
  const committers = new Map<Queue, GroupCommitter<BatchJob>>();
  // Last bound read per prefix: safe to reuse while Redis is down, since a bound only
  // ever names ids that were final when it was read.
  const lastBounds = new Map<string, ListBound>();

  /** The queue and ledger of a list prefix: its shard's, or the binding's own. */
  function route(q: QueueBinding, prefix: string): Pick<Shard, 'queue' | 'ledger'> & { shard?: Shard } {
    if (!q.shards) return q;
    const shard = q.shards.forPrefix(prefix);
    return { queue: shard.queue, ledger: shard.ledger, shard };
  }

  /** With REDIS_WAIT_REPLICAS: resolves once the shard's node has replicated this push, else 503. */
  async function replicated(q: QueueBinding, s: { shard?: Shard }): Promise<void> {
    if (!q.shards?.waitsForReplicas || !s.shard) return;
    try {
      await q.shards.replicate(s.shard);
    } catch {
      // Enqueued, but maybe only on a master that could still fail over without it: no 200. The
      // client's retry (same Idempotency-Key or body) is answered with this batch id once replicated.
      throw unavailable('batch not yet replicated (REDIS_WAIT_REPLICAS)');
    }
  }

  /**
   * The job payload of a batch: its Parquet file when the body was prepared (the encoder then
   * only writes it), else the JSON, deflated. A prepared body whose encode fails here (it passed
   * the same scan the encoder runs, so that is a bug, not bad data) goes as JSON, and the encoder
   * encodes it or dead-letters it with the reason.
   */
  async function payloadOf(body: Buffer, prepared: PreparedBatch | undefined, receivedAt: number): Promise<Pick<BatchJob, 'encoding' | 'body' | 'bodyBytes' | 'jsonBytes'>> {
    if (prepared) {
      const t0 = performance.now();
      try {
        const thread = queue?.encodeThread?.();
        // A thread that does not answer in time (stuck, or far behind) costs the push its shortcut, not its answer.
        // The stamped stream moves to the thread (no copy): a failure falls back to the JSON, not to it.
        return packParquet(thread ? await withTimeout(thread.encode(prepared.stamp(receivedAt), { transfer: true }), enqueueTimeoutMs, 'Parquet encode') : prepared.toParquet(receivedAt), body.length);
      } catch (err) {
        // Falls through to the JSON payload.
        opts.observe?.encodeFailed?.(err as Error);
      } finally {
        opts.observe?.encodeSeconds?.((performance.now() - t0) / 1000);
      }
    }
    return packBody(body);
  }

  /** The claim of a push with an Idempotency-Key. */
  function keyClaim(prefix: string, idemKey: string, decodedHash: string): IdempotencyClaim {
    return { family: 'key', scope: `${collection}\n${prefix}\n${idemKey}`, bodyHash: decodedHash, windowSeconds: keyWindowSeconds };
  }

  async function pushQueued(
    qb: QueueBinding,
    params: Readonly<Record<string, string>>,
    body: Buffer,
    prepared: PreparedBatch | undefined,
    events: number,
    hash: string,
    decodedHash: string,
    idemKey?: string,
    remint = true,
    bodyDedup = false,
  ): Promise<PushResult> {
    const prefix = listPrefix(template, params);
    const q = route(qb, prefix);
    // The keyed claim's scope holds the key, not the body: the same key with another body is a
    // conflict (Stripe's rule), never a silent merge. Without a key only a byte-identical body
    // within the short retry window counts as a retry, and only when every event carries a
    // message_id (`bodyDedup`): two devices sending the same heartbeat are two batches, not one.
    const claim: IdempotencyClaim | undefined =
      idemKey !== undefined
        ? keyClaim(prefix, idemKey, decodedHash)
        : bodyWindowSeconds > 0 && bodyDedup
          ? { family: 'body', scope: `${collection}\n${prefix}\n${decodedHash}`, bodyHash: decodedHash, windowSeconds: bodyWindowSeconds }
          : undefined;
    const t0 = performance.now();
    let minted;
    try {
      minted = await withTimeout(q.ledger.mint(prefix, { idempotency: claim }), enqueueTimeoutMs, 'id minting');
    } catch {
      throw unavailable('queue unavailable (Redis)');
    } finally {
      opts.observe?.mintSeconds?.((performance.now() - t0) / 1000);
    }
    if (minted.conflict) {
      throw new HttpError(
        422,
        `Idempotency-Key "${idemKey ?? ''}" was already used within the last ${keyWindowSeconds} s for a different body (batch ${minted.batchId}); this body was not stored. Send a new key for a new batch`,
      );
    }
    const { batchId } = minted;
    if (minted.deduplicated) {
      const seen = await confirmEnqueued(q, prefix, batchId);
      if (seen === 'enqueued') {
        await replicated(qb, q);
        return { hash, batchId, events, deduplicated: true };
      }
      if (seen === 'gone') {
        // Not in flight and no job: written (and removed on completion), or minted by an API that
        // died before enqueueing and then reaped. Only the store can tell; a reaped id must not be
        // answered, or the client would stop retrying a batch that exists nowhere.
        if (await fileExists(batchKey(template, params, batchId))) return { hash, batchId, events, deduplicated: true };
        await q.ledger.release(prefix, batchId, claim).catch(() => undefined);
        if (!remint) throw unavailable('an earlier push with this idempotency key was lost before it was queued');
        return pushQueued(qb, params, body, prepared, events, hash, decodedHash, idemKey, false, bodyDedup);
      }
      // 'abandoned': the first push minted this id and died before enqueueing; the id still holds
      // its place in the ordering ledger, so enqueueing this retry's body under it keeps the
      // `?after=` promise, and the job id makes a late first enqueue a no-op.
    }
    const job: BatchJob = {
      v: 1,
      collection,
      key: batchKey(template, params, batchId),
      prefix,
      params: { ...params },
      batchId,
      receivedAt: batchIdMs(batchId),
      events,
      ...(await payloadOf(body, prepared, batchIdMs(batchId))),
    };
    const t1 = performance.now();
    const ticket = enqueue(q, job);
    try {
      await withTimeout(ticket.done, enqueueTimeoutMs, 'enqueue');
    } catch (err) {
      // Still waiting for its group: it never will be sent now, so nothing of it is in the queue.
      const sent = !ticket.withdraw();
      // A timed-out add may still have landed: then the batch is durable and must be answered as such.
      const group = ticket.group();
      const jobId = group && group[0] && group.length > 1 ? groupJobId(group[0].batchId) : batchId;
      const state = sent ? await withTimeout(q.queue.getJobState(jobId), 1000, 'job state').catch(() => 'unknown') : 'unknown';
      if (state !== 'unknown') {
        await replicated(qb, q);
        return { hash, batchId, events, deduplicated: minted.deduplicated };
      }
      if (sent && !commandNeverRan(err)) {
        // The add went out and nobody knows whether it ran: a stalled Redis runs it later, and the
        // batch is then written. So the id stays in flight (the list must not pass it before its
        // file exists) and the key stays claimed (the retry must get this batch, not a second
        // file; confirmEnqueued finds the job, or takes the id over once it is abandoned). If no
        // job ever appears, the reaper releases the id after ORPHAN_GRACE_SECONDS.
        opts.observe?.enqueueUnknown?.();
        throw unavailable('queue did not answer in time (Redis), so this batch may still be queued: send the same body (and Idempotency-Key) again to get its id');
      }
      // Not enqueued: take the id out of flight so it does not hold the list back, and forget
      // the idempotency key so the client's retry is accepted. If Redis is unreachable this fails
      // too; the id then stays in flight and the retry takes it over (see confirmEnqueued).
      await q.ledger.release(prefix, batchId, claim).catch(() => undefined);
      throw unavailable('queue unavailable (Redis)');
    } finally {
      opts.observe?.enqueueSeconds?.((performance.now() - t1) / 1000);
    }
    opts.observe?.enqueuedBytes?.(job.body.length + JOB_OVERHEAD_BYTES);
    await replicated(qb, q);
    return { hash, batchId, events, deduplicated: minted.deduplicated };
  }

  /**
   * Adds the batch's job, alone or (while an add to the same queue runs) in a group job with other
   * pushes' batches. A group's members are noted in the ledger with its add, so a member is never
   * in the queue long without the ledger knowing which job holds it.
   */
  function enqueue(q: Pick<Shard, 'queue' | 'ledger'>, job: BatchJob): GroupTicket<BatchJob> {
    if (groupMax <= 1) {
      const done = q.queue.add(JOB_NAME, job, { ...BATCH_JOB_OPTIONS, jobId: job.batchId }).then(() => undefined);
      return { done, group: () => [job], withdraw: () => false };
    }
    let c = committers.get(q.queue);
    if (!c) {
      const { queue: bq, ledger } = q;
      c = new GroupCommitter<BatchJob>({
        maxItems: groupMax,
        maxBytes: GROUP_MAX_BODY_BYTES,
        sizeOf: (j) => j.bodyBytes,
        send: async (jobs) => {
          const [first, ...rest] = jobs as [BatchJob, ...BatchJob[]];
          if (rest.length === 0) {
            await bq.add(JOB_NAME, first, { ...BATCH_JOB_OPTIONS, jobId: first.batchId });
            return;
          }
          const id = groupJobId(first.batchId);
          const members = jobs.map((j) => j.batchId);
          const group: BatchGroupJob = { v: 2, batches: [...jobs] };
          // One round trip for both: the note and the add go out together on the producer's
          // connection. Only the reaper (after ORPHAN_GRACE_SECONDS) and a retried push (which
          // polls) read the note, so it need not land before the add, only with it.
          const [noted, added] = await Promise.allSettled([ledger.noteGroup(id, members), bq.add(JOB_NAME, group, { ...BATCH_JOB_OPTIONS, jobId: id })]);
          if (added.status === 'rejected') throw added.reason;
          // The job is in the queue: its members must be findable before the reaper's grace ends.
          if (noted.status === 'rejected') await ledger.noteGroup(id, members);
          opts.observe?.groupSize?.(jobs.length);
        },
      });
      committers.set(q.queue, c);
    }
    return c.submit(job);
  }

  async function fileExists(key: string): Promise<boolean> {
    try {
      // A one-key listing is cheaper than fetching an 8 MB object just to see that it exists.
      return (await store.listKeys(key, { limit: 1 }))[0] === key;
    } catch {
      throw unavailable('store unavailable');
    }
  }

  /**
   * A retry may arrive while the first push is between minting and enqueueing: answer it only
   * once the job exists, so a 200 always means durable. `gone`: the id left flight without a job
   * (written and removed, or reaped). `abandoned`: the id is still in flight with no job long after
   * the first push must have finished or given up (its API died in between).
   */
  async function confirmEnqueued(q: Pick<Shard, 'queue' | 'ledger'>, prefix: string, batchId: string): Promise<'enqueued' | 'gone' | 'abandoned'> {
    // The first push enqueues within enqueueTimeoutMs of minting or releases the id; twice that
    // plus a margin leaves room for clock skew between this host and the Redis that minted it.
    const abandonedAfterMs = 2 * enqueueTimeoutMs + 1000;
    const deadline = Date.now() + enqueueTimeoutMs;
    for (let i = 0; i < 100 && Date.now() < deadline; i++) {
      try {
        const state = await q.queue.getJobState(batchId);
        if (state !== 'unknown') return 'enqueued';
        // A group's member: its job is the group's (noted in the ledger with that job's add).
        const group = await q.ledger.groupOf(batchId);
        if (group !== null && (await q.queue.getJobState(group)) !== 'unknown') return 'enqueued';
        if (!(await q.ledger.isPending(prefix, batchId))) return 'gone';
      } catch {
        throw unavailable('queue unavailable (Redis)');
      }
      if (Date.now() - batchIdMs(batchId) > abandonedAfterMs) return 'abandoned';
      await new Promise((r) => setTimeout(r, 50));
    }
    throw unavailable('an earlier push with this idempotency key is still being accepted');
  }

  async function pushInline(ledger: MemoryLedger, params: Readonly<Record<string, string>>, text: string, events: number, hash: string): Promise<PushResult> {
    const prefix = listPrefix(template, params);
    const { batchId } = await ledger.mint(prefix);
    try {
      const encoded = encodeBatch(text, batchIdMs(batchId));
      if (!encoded.ok) throw new HttpError(400, encoded.reason);
      await store.putBytes(batchKey(template, params, batchId), encoded.bytes, { contentType: PARQUET_MIME_TYPE });
    } catch (err) {
      if (err instanceof StoreError) throw unavailable('store unavailable');
      throw err;
    } finally {
      await ledger.release(prefix, batchId);
    }
    return { hash, batchId, events, deduplicated: false };
  }

  return {
    name: 'events',
    collection,
    template,
    store,
    mode: queue ? 'queue' : 'inline',

    encodesBody: (bytes) => encodeMaxBytes > 0 && bytes >= API_ENCODE_MIN_BYTES && bytes <= encodeMaxBytes,

    async push(params, body, validated, pushOpts = {}) {
      const hash = pushOpts.hash ?? sha256Hex(body);
      if (validated.events === 0) return { hash, batchId: null, events: 0, deduplicated: false };
      if (queue) {
        const decodedHash = pushOpts.decodedHash ?? (pushOpts.hash === undefined ? hash : sha256Hex(body));
        return pushQueued(queue, params, body, validated.prepared, validated.events, hash, decodedHash, pushOpts.idempotencyKey, true, validated.everyEventHasMessageId === true);
      }
      return pushInline(inlineLedger as MemoryLedger, params, validated.text, validated.events, hash);
    },

    async idempotencyClaimed(params, idempotencyKey, decodedHash) {
      if (!queue || keyWindowSeconds <= 0) return false;
      const prefix = listPrefix(template, params);
      try {
        return (await withTimeout(route(queue, prefix).ledger.lookup(keyClaim(prefix, idempotencyKey, decodedHash)), enqueueTimeoutMs, 'idempotency lookup')) !== null;
      } catch {
        throw unavailable('queue unavailable (Redis)');
      }
    },

    async list(params, after, limit) {
      const prefix = listPrefix(template, params);
      let bound: ListBound;
      try {
        if (queue && after !== undefined) {
          // A poller that keeps up asks for ids after a recent cursor: Redis' index of written ids
          // answers that in O(log n), however many files the prefix holds.
          const fromIndex = await withTimeout(route(queue, prefix).ledger.listWritten(prefix, after, limit + 1), 2000, 'list index');
          lastBounds.set(prefix, fromIndex.bound);
          if (fromIndex.ids) {
            const visible = fromIndex.ids.filter((id) => visibleUnder(fromIndex.bound, id));
            return { items: visible.slice(0, limit).map((id) => `${id}.parquet`), hasMore: visible.length > limit };
          }
          bound = fromIndex.bound;
        } else {
          bound = queue ? await withTimeout(route(queue, prefix).ledger.listBound(prefix), 2000, 'list bound') : await (inlineLedger as MemoryLedger).listBound(prefix);
          lastBounds.set(prefix, bound);
        }
      } catch {
        const cached = lastBounds.get(prefix);
        if (!cached) throw unavailable('ordering ledger unavailable (Redis)');
        bound = cached;
      }
      const items: string[] = [];
      let startAfter = after === undefined ? undefined : `${prefix}${after}.parquet`;
      // Foreign files (not <id>.parquet) are skipped; pages are bounded so a folder full of them cannot spin.
      for (let page = 0; page < 50; page++) {
        const want = limit + 1 - items.length;
        const keys = await store.listKeys(prefix, { startAfter, limit: want });
        for (const key of keys) {
          const name = key.slice(prefix.length);
          const id = name.endsWith('.parquet') ? name.slice(0, -8) : '';
          if (!isBatchId(id)) continue;
          if (!visibleUnder(bound, id)) return { items: items.slice(0, limit), hasMore: items.length > limit };
          items.push(name);
        }
        if (items.length > limit || keys.length < want) break;
        startAfter = keys[keys.length - 1];
      }
      return { items: items.slice(0, limit), hasMore: items.length > limit };
    },

    async pull(params, ref) {
      const batchId = parseBatchRef(ref);
      if (!batchId) return null;
      const obj = await store.getBytes(batchKey(template, params, batchId));
      return obj ? { ...obj, batchId } : null;
    },
  };
}
