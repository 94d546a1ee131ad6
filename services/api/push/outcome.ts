import type { PreparedBatch } from '../../../shared/parquet/encode.js';

/**
 * One push, as the router hands it over once the body is read and checked: the list-prefix
 * params (the URL's last segment already dropped), the decoded body and what its check found.
 */
export interface PushRequest {
  readonly params: Readonly<Record<string, string>>;
  /** The decoded body (after any Content-Encoding). */
  readonly body: Buffer;
  readonly events: number;
  /** The decoded text, for the inline encoder only (a queued push never decodes its body). */
  readonly text?: string;
  /** The body scanned by `prepareBatch` (a size `encodesBody` accepts): the push encodes its file itself. */
  readonly prepared?: PreparedBatch;
  /** The check's: a push without a key is deduplicated by its body only when every event has a `message_id`. */
  readonly everyEventHasMessageId: boolean;
  readonly idempotencyKey?: string;
  /** Sha256 hex of the body as sent: the answer's `hash`. */
  readonly hash: string;
  /** Sha256 hex of the decoded body: what idempotency compares. */
  readonly decodedHash: string;
}

/** The batch is durably in the queue (and on REDIS_WAIT_REPLICAS replicas): a new batch id. */
export interface Accepted {
  readonly kind: 'accepted';
  readonly batchId: string;
  readonly hash: string;
  readonly events: number;
}

/** A retry (same Idempotency-Key, or the same body within the short window): the first push's id, nothing new stored. */
export interface Duplicate {
  readonly kind: 'duplicate';
  readonly batchId: string;
  readonly hash: string;
  readonly events: number;
}

/** An envelope with no events: nothing stored, no id. */
export interface Empty {
  readonly kind: 'empty';
  readonly hash: string;
}

/** The Idempotency-Key was used within its window for another body: nothing stored. */
export interface Conflict {
  readonly kind: 'conflict';
  /** The id the key's first push got. */
  readonly batchId: string;
  readonly reason: string;
}

/**
 * The batch could not be made durable now. `maybeQueued`: a batch for this push (or for the
 * earlier push it retries) may still be in the queue or land there, so its id stays in flight
 * and its claim stays; false: nothing of it is queued and the claim was given back (or never
 * taken). Either way the client retries with the same body (and key).
 */
export interface Unavailable {
  readonly kind: 'unavailable';
  readonly maybeQueued: boolean;
  readonly reason: string;
  /** Seconds the client should wait. */
  readonly retryAfter?: number;
}

/** The body is bad data the encoder refuses (inline mode; a checked body never gets here). */
export interface Rejected {
  readonly kind: 'rejected';
  readonly reason: string;
}

/** What `accept` answers; only the router knows which HTTP status each one is. */
export type PushOutcome = Accepted | Duplicate | Empty | Conflict | Unavailable | Rejected;

/** The outcome every dependency failure of the push path ends in. */
export function unavailable(reason: string, maybeQueued: boolean): Unavailable {
  return { kind: 'unavailable', maybeQueued, reason, retryAfter: 1 };
}
