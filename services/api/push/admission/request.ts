import { createHash } from 'node:crypto';
import type { PreparedBatch } from '../../../../shared/parquet/encode.js';
import type { PushRequest } from '../outcome.js';

function sha256Hex(data: Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

/** What {@link pushRequestOf} builds a request from: the HTTP route's admission and the library's `plugin.push` alike. */
export interface PushRequestParts {
  /** The list-prefix params (the batch id's, if present, is left out by the caller). */
  params: Readonly<Record<string, string>>;
  /** The decoded body. */
  body: Buffer;
  /** What the body's scan found. */
  check: { events: number; text?: string; prepared?: PreparedBatch; everyEventHasMessageId?: boolean };
  idempotencyKey?: string;
  /** sha256 hex of the body as sent; default sha256(body). */
  hash?: string;
  /** sha256 hex of `body`; default: `hash` when the body was sent as is, else computed here. */
  decodedHash?: string;
}

/**
 * The one builder of the typed request `PushService.accept` takes. A push without a key is
 * deduplicated by its body only when the scan says every event has a `message_id` (absent: no).
 */
export function pushRequestOf(p: PushRequestParts): PushRequest {
  const hash = p.hash ?? sha256Hex(p.body);
  const decodedHash = p.decodedHash ?? (p.hash === undefined ? hash : sha256Hex(p.body));
  return {
    params: p.params,
    body: p.body,
    events: p.check.events,
    text: p.check.text ?? '',
    prepared: p.check.prepared,
    everyEventHasMessageId: p.check.everyEventHasMessageId === true,
    idempotencyKey: p.idempotencyKey,
    hash,
    decodedHash,
  };
}
