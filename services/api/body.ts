import { createHash } from 'node:crypto';
import { type BrotliDecompress, type Gunzip, type Inflate, constants as zc, createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import type { Request } from 'express';
import type { ByteBudget } from '../../shared/byte-budget.js';
import { HttpError } from '../../shared/errors.js';

/** The content codings push decodes (RFC 9110 §8.4.1); `x-gzip` is read as `gzip`. */
export const CONTENT_CODINGS = ['identity', 'gzip', 'deflate', 'br'] as const;
export type ContentCoding = (typeof CONTENT_CODINGS)[number];

/**
 * The one coding to undo for a `Content-Encoding` header, or a 415 message naming what is not
 * supported. `identity` entries are ignored; more than one real coding ("gzip, br") is refused:
 * each layer would multiply what a small body can inflate to, and no SDK sends them stacked.
 */
export function parseContentEncoding(header: string | undefined): { ok: true; coding: ContentCoding } | { ok: false; error: string } {
  const codings = (header ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s !== '' && s !== 'identity')
    .map((s) => (s === 'x-gzip' ? 'gzip' : s));
  const supported = 'gzip, deflate, br or identity';
  const unknown = codings.find((c) => !(CONTENT_CODINGS as readonly string[]).includes(c));
  if (unknown !== undefined) return { ok: false, error: `Content-Encoding "${printable(unknown)}" is not supported; use ${supported}` };
  if (codings.length > 1) return { ok: false, error: `Content-Encoding "${printable(header ?? '')}" stacks ${codings.length} codings; send at most one of ${supported}` };
  return { ok: true, coding: (codings[0] as ContentCoding | undefined) ?? 'identity' };
}

/** A header value as it may be echoed in an error: printable ASCII, bounded. */
function printable(value: string): string {
  const clean = value.replace(/[^\x20-\x7e]/g, '?');
  return clean.length > 64 ? `${clean.slice(0, 64)}…` : clean;
}

/** Why a body could not be read; the router counts each in its own metric. */
export type BodyErrorReason = 'too_large' | 'over_budget' | 'bad_encoding' | 'unreadable';

/** A refused body: an HttpError plus the reason, so the router can count it without parsing messages. */
export class BodyError extends HttpError {
  constructor(
    readonly reason: BodyErrorReason,
    status: number,
    message: string,
    headers?: Record<string, string>,
  ) {
    super(status, message, headers);
  }
}

export interface ReadBodyOptions {
  /** The collection's maxBodyBytes: bounds the bytes as sent and, for a coded body, the decoded bytes. */
  maxBytes: number;
  /** From {@link parseContentEncoding}; default identity. */
  coding?: ContentCoding;
  /**
   * The process' budget of body bytes held at once. The declared Content-Length is taken before
   * reading; bytes past it (no Content-Length, or decoded bytes past the coded size) are taken as
   * they arrive. Over the budget: 503 + Retry-After.
   */
  budget?: ByteBudget;
  /** Bytes this request took from `budget`, written here as they are taken; the caller gives them back once done with the body. */
  held?: { bytes: number };
}

export interface RequestBody {
  /** The decoded body (the bytes as sent when there is no coding). */
  bytes: Buffer;
  /** sha256 hex of the bytes as sent (before decoding). */
  hash: string;
  /**
   * sha256 hex of the decoded body (equal to `hash` without a coding): what idempotency compares,
   * so the same JSON compressed another way is the same body.
   */
  decodedHash: string;
  /** Bytes as sent. */
  sentBytes: number;
}

/** Seconds a push refused for lack of body budget is told to wait: bodies in flight clear in about that. */
const BUDGET_RETRY_AFTER_SECONDS = '1';
/** Output slices of the decoders: fewer round trips to the zlib thread than the 16 KB default. */
const DECODE_CHUNK_BYTES = 64 * 1024;

function decoderFor(coding: Exclude<ContentCoding, 'identity'>): Gunzip | Inflate | BrotliDecompress {
  if (coding === 'gzip') return createGunzip({ chunkSize: DECODE_CHUNK_BYTES });
  if (coding === 'deflate') return createInflate({ chunkSize: DECODE_CHUNK_BYTES });
  return createBrotliDecompress({ chunkSize: DECODE_CHUNK_BYTES, params: { [zc.BROTLI_DECODER_PARAM_LARGE_WINDOW]: 0 } });
}

/**
 * Reads a push body: refused from Content-Length before reading and while streaming when there is
 * none, so an oversized body never sits in memory; a coded body (gzip, deflate, br) is decoded as
 * it streams and refused as soon as its decoded size passes `maxBytes`, without inflating the rest.
 * The hash is of the bytes as sent, computed as they stream; `decodedHash` of the decoded bytes.
 * A coded body is exactly one stream: data after its end (a second stream, padding, garbage) is
 * refused with 400, so a 200 never stands for bytes that were not stored.
 */
export async function readBody(req: Request, opts: ReadBodyOptions): Promise<RequestBody> {
  const { maxBytes, budget } = opts;
  const coding = opts.coding ?? 'identity';
  const held = opts.held ?? { bytes: 0 };
  const header = req.headers['content-length'];
  const declared = header === undefined ? undefined : Number(header);
  if (declared !== undefined && declared > maxBytes) {
    const headers = await discardRest(req);
    throw new BodyError('too_large', 413, `body of ${header} bytes is over this collection's limit of ${maxBytes} bytes`, headers);
  }
  const overBudget = async (): Promise<never> => {
    const headers = await discardRest(req);
    throw new BodyError('over_budget', 503, 'overloaded: request bodies in flight are at this process\' memory budget (MAX_INFLIGHT_BYTES); retry later', {
      ...headers,
      'Retry-After': BUDGET_RETRY_AFTER_SECONDS,
    });
  };
  /** Takes budget so that `total` bytes of this body are covered; false when the budget is spent. */
  const cover = (total: number): boolean => {
    if (!budget || total <= held.bytes) return true;
    if (!budget.tryTake(total - held.bytes, held.bytes)) return false;
    held.bytes = total;
    return true;
  };
  if (declared !== undefined && Number.isSafeInteger(declared) && !cover(declared)) return overBudget();

  return new Promise<RequestBody>((resolve, reject) => {
    const decoder = coding === 'identity' ? undefined : decoderFor(coding);
    const hash = createHash('sha256');
    const decodedHash = decoder === undefined ? undefined : createHash('sha256');
    // A declared plain body is read straight into one buffer of its size: no chunk list to
    // concatenate, so the body is held once, not twice, at the end of the read.
    const preallocated = coding === 'identity' && declared !== undefined && Number.isSafeInteger(declared) ? Buffer.allocUnsafe(declared) : undefined;
    const chunks: Buffer[] = [];
    let sent = 0;
    let decoded = 0;
    let done = false;
    /** The last 4 bytes as sent: a gzip stream ends with its decoded size (ISIZE, RFC 1952). */
    let tail = Buffer.alloc(0);
    let received = false;

    const detach = (): void => {
      done = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
      if (decoder) {
        decoder.off('data', onDecoded);
        decoder.off('end', onDecodedEnd);
        decoder.off('error', onDecodeError);
        decoder.off('drain', onDrain);
        // A late error from the zlib thread must not go unhandled once nobody listens.
        decoder.on('error', () => undefined);
        // Stops the zlib thread between output slices: the rest of a bomb is never inflated.
        decoder.destroy();
      }
      chunks.length = 0;
    };
    /** Stops reading, drops what was read, and rejects once the rest of the body is drained. */
    const refuse = (reason: BodyErrorReason, status: number, message: string, extra: Record<string, string> = {}): void => {
      if (done) return;
      detach();
      // What was read is dropped now: the budget is free for other pushes while the rest drains.
      budget?.give(held.bytes);
      held.bytes = 0;
      void discardRest(req).then((headers) => reject(new BodyError(reason, status, message, { ...headers, ...extra })));
    };
    const fail = (err: BodyError): void => {
      if (done) return;
      detach();
      reject(err);
    };
    const succeed = (bytes: Buffer): void => {
      if (done) return;
      detach();
      const sentHash = hash.digest('hex');
      resolve({ bytes, hash: sentHash, decodedHash: decodedHash ? decodedHash.digest('hex') : sentHash, sentBytes: sent });
    };
    const budgetSpent = (): void =>
      refuse('over_budget', 503, 'overloaded: request bodies in flight are at this process\' memory budget (MAX_INFLIGHT_BYTES); retry later', { 'Retry-After': BUDGET_RETRY_AFTER_SECONDS });

    const onData = (chunk: Buffer): void => {
      if (done) return;
      sent += chunk.length;
      if (sent > maxBytes) return refuse('too_large', 413, `body is over this collection's limit of ${maxBytes} bytes`);
      hash.update(chunk);
      if (decoder) {
        tail = Buffer.from(Buffer.concat([tail, chunk.subarray(-4)]).subarray(-4));
        // Raw chunks only pass through the decoder; what this request holds is the decoded output.
        if (!decoder.write(chunk)) {
          req.pause();
          decoder.once('drain', onDrain);
        }
        return;
      }
      if (!cover(sent)) return budgetSpent();
      if (preallocated && sent <= preallocated.length) chunk.copy(preallocated, sent - chunk.length);
      else chunks.push(chunk);
    };
    const onDrain = (): void => {
      if (!done) req.resume();
    };
    const onEnd = (): void => {
      received = true;
      if (decoder) decoder.end();
      else succeed(preallocated && sent === preallocated.length ? preallocated : Buffer.concat(chunks, sent));
    };
    const onDecoded = (out: Buffer): void => {
      if (done) return;
      decoded += out.length;
      if (decoded > maxBytes) return refuse('too_large', 413, `body decoded from Content-Encoding ${coding} is over this collection's limit of ${maxBytes} bytes`);
      if (!cover(decoded)) return budgetSpent();
      decodedHash?.update(out);
      chunks.push(out);
    };
    const onDecodedEnd = (): void => {
      if (trailing()) return refuse('bad_encoding', 400, `body has data after the end of its ${coding} stream (Content-Encoding ${coding}): send exactly one stream, with nothing after it`);
      succeed(Buffer.concat(chunks, decoded));
    };
    /**
     * True when the body holds more than its one stream. A deflate or br decoder stops at the end
     * of its stream (ending early while the body still arrives) and consumes nothing after it, so
     * its input count falls short. Node's gunzip skips zero padding (caught the same way) but
     * decodes a second gzip member as if it were the same stream: the last member's trailer then
     * gives its own size, not the whole output's. (A leading member that decodes to nothing is
     * not seen; it adds no data.)
     */
    const trailing = (): boolean => {
      if (!received || !decoder || decoder.bytesWritten !== sent) return true;
      return coding === 'gzip' && (tail.length < 4 || tail.readUInt32LE(0) !== decoded % 2 ** 32);
    };
    const onDecodeError = (err: Error & { code?: string }): void =>
      refuse('bad_encoding', 400, `body is not valid ${coding} data (Content-Encoding ${coding}): ${err.code ?? 'decode error'}`);
    const onError = (err: Error): void => fail(new BodyError('unreadable', 400, `request body could not be read: ${err.message}`));
    const onAborted = (): void => fail(new BodyError('unreadable', 400, 'request aborted'));

    if (decoder) {
      decoder.on('data', onDecoded);
      decoder.on('end', onDecodedEnd);
      decoder.on('error', onDecodeError);
    }
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onAborted);
  });
}

/** A refused body is read and dropped up to this much; past it the connection is closed. */
const DRAIN_LIMIT_BYTES = 32 * 1024 * 1024;
/** ...and while it keeps arriving: a pause this long, or this much time in all, closes the connection. */
const DRAIN_IDLE_MS = 5000;
const DRAIN_TOTAL_MS = 30_000;

/**
 * Reads and drops the rest of a refused body before the answer goes out. Answering while the
 * client is still sending makes Node close the socket under it; the client's next write draws a
 * reset and the answer is lost (the client sees EPIPE/ECONNRESET instead). A body declared larger
 * than DRAIN_LIMIT_BYTES, or one that stalls or drags on, is answered at once with
 * `Connection: close`. The idle limit (not a total one) lets a burst of refused bodies that share
 * a busy loopback all drain. Resolves with the headers the answer needs.
 */
export function discardRest(req: Request): Promise<Record<string, string>> {
  const close = { Connection: 'close' };
  if (req.complete) return Promise.resolve({});
  if (Number(req.headers['content-length']) > DRAIN_LIMIT_BYTES) return Promise.resolve(close);
  return new Promise((resolve) => {
    let dropped = 0;
    const done = (headers: Record<string, string>): void => {
      clearTimeout(idle);
      clearTimeout(total);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onEnd);
      // Whatever still arrives is dropped by Node once the answer is sent.
      req.resume();
      resolve(headers);
    };
    const onData = (chunk: Buffer): void => {
      dropped += chunk.length;
      if (dropped > DRAIN_LIMIT_BYTES) done(close);
      else idle.refresh();
    };
    const onEnd = (): void => done({});
    const idle = setTimeout(() => done(close), DRAIN_IDLE_MS);
    const total = setTimeout(() => done(close), DRAIN_TOTAL_MS);
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onEnd);
    req.resume();
  });
}

/** True when the request's Content-Type (without parameters) is one of `allowed`. */
export function contentTypeAllowed(header: string | undefined, allowed: readonly string[]): boolean {
  if (!header) return false;
  const [type, ...params] = header.split(';').map((s) => s.trim().toLowerCase());
  if (!type || !allowed.some((a) => a.toLowerCase() === type)) return false;
  // JSON is UTF-8 by definition (RFC 8259); any other declared charset is refused.
  const charset = params.find((p) => p.startsWith('charset='));
  return !charset || /^charset="?utf-?8"?$/.test(charset);
}
