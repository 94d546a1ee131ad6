/**
 * A worker thread that checks large push bodies ({@link checkEnvelope}) off the API's event loop.
 * The check is linear but not cheap: an 8 MB body of escaped keys takes 30-70 ms of CPU, and when
 * a burst of such bodies finish arriving together, their checks ran back to back in one turn of
 * the loop, which then held /healthz and every other push for up to 0.9 s (issue 47;
 * docs/decisions/0024-envelope-scan-thread.md). Here the checks queue on one thread instead and
 * the loop only moves the bytes: the body's ArrayBuffer is transferred there and back, never
 * copied. Small bodies stay on the loop: below {@link SCAN_THREAD_MIN_BYTES} the hand-off costs
 * about as much as the scan.
 */
import type { EnvelopeCheck } from './envelope.js';
import { type PrepareResult, preparedBatchOf } from './parquet/encode.js';
import type { ScanReply, ScanRequest } from './envelope-thread.js';
import { RequestThread, ownsItsBuffer, threadEntry } from './request-thread.js';

/** Bodies from this size are checked on the thread (a 256 KiB body scans in 1-3 ms on the loop). */
export const SCAN_THREAD_MIN_BYTES = 256 * 1024;

/** An idle thread is ended after this long (its isolate is ~10 MiB of RSS, measured, an idle API need not hold). */
const RETIRE_IDLE_MS = 10_000;

/** The check of a body, and the body itself (a new Buffer over the same memory: the one passed in is left empty). */
export interface ScannedBody {
  check: EnvelopeCheck;
  body: Buffer;
}

/**
 * A body prepared on the thread (its check and Arrow IPC stream: `prepareBatch`), or only checked
 * (`check`) when it has more events than the prepare's `maxRows`; and the body itself as in
 * {@link ScannedBody}.
 */
export type PreparedBody = { prepared: PrepareResult; body: Buffer } | { check: EnvelopeCheck; body: Buffer };

/** A body the warm-up prepares: valid, no events. */
const WARM_UP_BODY = '{"data":{"events":[]},"baseHash":null}';

export class EnvelopeScanThread {
  private readonly thread: RequestThread<ScanReply>;
  private warming: Promise<void> | undefined;
  private warm = false;

  constructor(private readonly retireIdleMs = RETIRE_IDLE_MS) {
    this.thread = new RequestThread<ScanReply>(
      threadEntry(import.meta.url, 'envelope-thread'),
      'the envelope scan thread',
    );
  }

  /** True once the thread is closed, has died or was retired: start a new one to scan again. */
  get gone(): boolean {
    return this.thread.gone;
  }

  /**
   * Checks `body` on the thread. A body that fills its whole ArrayBuffer (what body.ts reads
   * bodies into) moves there and back without a copy and is left empty here: use the returned
   * `body`. Rejects only when the thread is gone or the scanner itself threw (a bug, not bad data).
   */
  async scan(body: Buffer): Promise<ScannedBody> {
    const reply = await this.request({ body });
    if (!('check' in reply)) throw new Error('the scan thread answered a check with something else');
    return { check: reply.check, body: bufferOf(reply.body) };
  }

  /**
   * `prepareBatch(body)` on the thread: the same check as {@link scan}, and the columns copied
   * into an Arrow IPC stream that moves back without a copy. A body of more than `maxRows` events
   * is only checked (its columns are not built past that many rows). The body moves as in {@link scan}.
   */
  async prepare(body: Buffer, maxRows: number): Promise<PreparedBody> {
    const reply = await this.request({ body, prepare: true, maxRows });
    return 'prepared' in reply
      ? { prepared: preparedBatchOf(reply.prepared), body: bufferOf(reply.body) }
      : { check: reply.check, body: bufferOf(reply.body) };
  }

  /**
   * True once this thread has loaded the prepare's module (apache-arrow, parquet-wasm: a few
   * hundred ms on a new thread). Until then a caller should prepare on its own thread and call
   * {@link warmPrepare}, so no push waits for that load (a new thread starts after each 10 s idle).
   */
  get prepareWarm(): boolean {
    return this.warm;
  }

  /** Loads the prepare's module on the thread in the background (once); {@link prepareWarm} says when it is done. */
  warmPrepare(): void {
    this.warming ??= this.prepare(Buffer.from(WARM_UP_BODY), 1).then(
      () => {
        this.warm = true;
      },
      () => undefined,
    );
  }

  private async request(request: Omit<ScanRequest, 'id'>): Promise<Extract<ScanReply, { ok: true }>> {
    const body = request.body;
    try {
      const reply = await this.thread.request(request, ownsItsBuffer(body) ? [body.buffer as ArrayBuffer] : []);
      if (!reply.ok) throw new Error(reply.error);
      return reply;
    } finally {
      this.thread.retireWhenIdle(this.retireIdleMs);
    }
  }

  /** Ends the thread; scans still waiting fail. Idempotent. */
  close(): Promise<void> {
    return this.thread.close();
  }
}

let shared: EnvelopeScanThread | undefined;

/** The process' one scan thread, started when first needed and again once it is gone (retired or dead). */
export function envelopeScanThread(): EnvelopeScanThread {
  if (!shared || shared.gone) shared = new EnvelopeScanThread();
  return shared;
}

function bufferOf(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
