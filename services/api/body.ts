import { type Hash, createHash } from 'node:crypto';
import {
  type BrotliDecompress,
  type Gunzip,
  type Inflate,
  constants as zc,
  createBrotliDecompress,
  createGunzip,
  createInflate,
} from 'node:zlib';
import type { Request } from 'express';
import type { ByteBudget } from '../../shared/byte-budget.js';
import { ApiError, type ErrorCode } from './error-map.js';
import type { ContentCoding } from './push/admission/content.js';

export {
  CONTENT_CODINGS,
  type ContentCoding,
  contentTypeAllowed,
  parseContentEncoding,
} from './push/admission/content.js';

/** Why a body could not be read; the router counts each in its own metric. */
export type BodyErrorReason = 'too_large' | 'over_budget' | 'bad_encoding' | 'unreadable';

/** The error code of each reason (the error map gives its status). */
const BODY_ERROR_CODES: Record<BodyErrorReason, ErrorCode> = {
  too_large: 'too_large',
  over_budget: 'overloaded',
  bad_encoding: 'bad_encoding',
  unreadable: 'bad_request',
};

/** A refused body: its code plus the reason, so the router can count it without parsing messages. */
export class BodyError extends ApiError {
  constructor(
    readonly reason: BodyErrorReason,
    message: string,
    headers?: Record<string, string>,
  ) {
    super(BODY_ERROR_CODES[reason], message, headers);
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
  return createBrotliDecompress({
    chunkSize: DECODE_CHUNK_BYTES,
    params: { [zc.BROTLI_DECODER_PARAM_LARGE_WINDOW]: 0 },
  });
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
    throw new BodyError(
      'too_large',
      `body of ${header} bytes is over this collection's limit of ${maxBytes} bytes`,
      headers,
    );
  }
  const cover = budgetCover(budget, held);
  if (declared !== undefined && Number.isSafeInteger(declared) && !cover(declared)) return refuseOverBudget(req);
  return new Promise<RequestBody>((resolve, reject) => {
    new BodyStream(req, { maxBytes, coding, budget, held, declared, cover }, resolve, reject).start();
  });
}

const OVER_BUDGET_MESSAGE =
  "overloaded: request bodies in flight are at this process' memory budget (MAX_INFLIGHT_BYTES); retry later";

/** A body whose declared length the budget cannot cover: refused with 503 + Retry-After before a byte is read. */
async function refuseOverBudget(req: Request): Promise<never> {
  const headers = await discardRest(req);
  throw new BodyError('over_budget', OVER_BUDGET_MESSAGE, { ...headers, 'Retry-After': BUDGET_RETRY_AFTER_SECONDS });
}

/** Takes budget so that `total` bytes of this body are covered; false when the budget is spent. */
function budgetCover(budget: ByteBudget | undefined, held: { bytes: number }): (total: number) => boolean {
  return (total) => {
    if (!budget || total <= held.bytes) return true;
    if (!budget.tryTake(total - held.bytes, held.bytes)) return false;
    held.bytes = total;
    return true;
  };
}

/** What {@link readBody} settled before the body streams. */
interface StreamPlan {
  maxBytes: number;
  coding: ContentCoding;
  budget: ByteBudget | undefined;
  held: { bytes: number };
  /** Content-Length, when sent. */
  declared: number | undefined;
  cover(total: number): boolean;
}

/**
 * One body as it streams: counted, hashed, decoded (with a coding) and bounded chunk by chunk.
 * Settles once: with the body, refused (once the rest is drained), or failed.
 */
class BodyStream {
  private readonly decoder: Gunzip | Inflate | BrotliDecompress | undefined;
  private readonly hash: Hash = createHash('sha256');
  private readonly decodedHash: Hash | undefined;
  private readonly preallocated: Buffer | undefined;
  private readonly chunks: Buffer[] = [];
  private sent = 0;
  private decoded = 0;
  private done = false;
  /** The last 4 bytes as sent: a gzip stream ends with its decoded size (ISIZE, RFC 1952). */
  private tail = Buffer.alloc(0);
  private received = false;

  constructor(
    private readonly req: Request,
    private readonly plan: StreamPlan,
    private readonly resolve: (body: RequestBody) => void,
    private readonly reject: (err: BodyError) => void,
  ) {
    const { coding, declared } = plan;
    this.decoder = coding === 'identity' ? undefined : decoderFor(coding);
    this.decodedHash = this.decoder === undefined ? undefined : createHash('sha256');
    // A declared plain body is read straight into one buffer of its size: no chunk list to
    // concatenate, so the body is held once, not twice, at the end of the read.
    this.preallocated =
      coding === 'identity' && declared !== undefined && Number.isSafeInteger(declared)
        ? Buffer.allocUnsafe(declared)
        : undefined;
  }

  start(): void {
    const { req, decoder } = this;
    if (decoder) {
      decoder.on('data', this.onDecoded);
      decoder.on('end', this.onDecodedEnd);
      decoder.on('error', this.onDecodeError);
    }
    req.on('data', this.onData);
    req.on('end', this.onEnd);
    req.on('error', this.onError);
    req.on('aborted', this.onAborted);
  }

  private detach(): void {
    const { req, decoder } = this;
    this.done = true;
    req.off('data', this.onData);
    req.off('end', this.onEnd);
    req.off('error', this.onError);
    req.off('aborted', this.onAborted);
    if (decoder) {
      decoder.off('data', this.onDecoded);
      decoder.off('end', this.onDecodedEnd);
      decoder.off('error', this.onDecodeError);
      decoder.off('drain', this.onDrain);
      // A late error from the zlib thread must not go unhandled once nobody listens.
      decoder.on('error', () => undefined);
      // Stops the zlib thread between output slices: the rest of a bomb is never inflated.
      decoder.destroy();
    }
    this.chunks.length = 0;
  }

  /** Stops reading, drops what was read, and rejects once the rest of the body is drained. */
  private refuse(reason: BodyErrorReason, message: string, extra: Record<string, string> = {}): void {
    if (this.done) return;
    this.detach();
    // What was read is dropped now: the budget is free for other pushes while the rest drains.
    this.plan.budget?.give(this.plan.held.bytes);
    this.plan.held.bytes = 0;
    void discardRest(this.req).then((headers) => this.reject(new BodyError(reason, message, { ...headers, ...extra })));
  }

  private fail(err: BodyError): void {
    if (this.done) return;
    this.detach();
    this.reject(err);
  }

  private succeed(bytes: Buffer): void {
    if (this.done) return;
    this.detach();
    const sentHash = this.hash.digest('hex');
    this.resolve({
      bytes,
      hash: sentHash,
      decodedHash: this.decodedHash ? this.decodedHash.digest('hex') : sentHash,
      sentBytes: this.sent,
    });
  }

  private budgetSpent(): void {
    this.refuse('over_budget', OVER_BUDGET_MESSAGE, { 'Retry-After': BUDGET_RETRY_AFTER_SECONDS });
  }

  private readonly onData = (chunk: Buffer): void => {
    if (this.done) return;
    const { maxBytes } = this.plan;
    this.sent += chunk.length;
    if (this.sent > maxBytes)
      return this.refuse('too_large', `body is over this collection's limit of ${maxBytes} bytes`);
    this.hash.update(chunk);
    if (this.decoder) return this.decode(this.decoder, chunk);
    if (!this.plan.cover(this.sent)) return this.budgetSpent();
    if (this.preallocated && this.sent <= this.preallocated.length)
      chunk.copy(this.preallocated, this.sent - chunk.length);
    else this.chunks.push(chunk);
  };

  /** Raw chunks only pass through the decoder; what this request holds is the decoded output. */
  private decode(decoder: Gunzip | Inflate | BrotliDecompress, chunk: Buffer): void {
    this.tail = Buffer.from(Buffer.concat([this.tail, chunk.subarray(-4)]).subarray(-4));
    if (!decoder.write(chunk)) {
      this.req.pause();
      decoder.once('drain', this.onDrain);
    }
  }

  private readonly onDrain = (): void => {
    if (!this.done) this.req.resume();
  };

  private readonly onEnd = (): void => {
    this.received = true;
    if (this.decoder) this.decoder.end();
    else
      this.succeed(
        this.preallocated && this.sent === this.preallocated.length
          ? this.preallocated
          : Buffer.concat(this.chunks, this.sent),
      );
  };

  private readonly onDecoded = (out: Buffer): void => {
    if (this.done) return;
    const { maxBytes, coding } = this.plan;
    this.decoded += out.length;
    if (this.decoded > maxBytes)
      return this.refuse(
        'too_large',
        `body decoded from Content-Encoding ${coding} is over this collection's limit of ${maxBytes} bytes`,
      );
    if (!this.plan.cover(this.decoded)) return this.budgetSpent();
    this.decodedHash?.update(out);
    this.chunks.push(out);
  };

  private readonly onDecodedEnd = (): void => {
    const { coding } = this.plan;
    if (this.trailing())
      return this.refuse(
        'bad_encoding',
        `body has data after the end of its ${coding} stream (Content-Encoding ${coding}): send exactly one stream, with nothing after it`,
      );
    this.succeed(Buffer.concat(this.chunks, this.decoded));
  };

  /**
   * True when the body holds more than its one stream. A deflate or br decoder stops at the end
   * of its stream (ending early while the body still arrives) and consumes nothing after it, so
   * its input count falls short. Node's gunzip skips zero padding (caught the same way) but
   * decodes a second gzip member as if it were the same stream: the last member's trailer then
   * gives its own size, not the whole output's. (A leading member that decodes to nothing is
   * not seen; it adds no data.)
   */
  private trailing(): boolean {
    if (!this.received || !this.decoder || this.decoder.bytesWritten !== this.sent) return true;
    return (
      this.plan.coding === 'gzip' && (this.tail.length < 4 || this.tail.readUInt32LE(0) !== this.decoded % 2 ** 32)
    );
  }

  private readonly onDecodeError = (err: Error & { code?: string }): void =>
    this.refuse(
      'bad_encoding',
      `body is not valid ${this.plan.coding} data (Content-Encoding ${this.plan.coding}): ${err.code ?? 'decode error'}`,
    );

  private readonly onError = (err: Error): void =>
    this.fail(new BodyError('unreadable', `request body could not be read: ${err.message}`));

  private readonly onAborted = (): void => this.fail(new BodyError('unreadable', 'request aborted'));
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
