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
import { Worker as Thread } from 'node:worker_threads';
import type { EnvelopeCheck } from './envelope.js';
import type { ScanReply, ScanRequest } from './envelope-thread.js';

/** Bodies from this size are checked on the thread (a 256 KiB body scans in 1-3 ms on the loop). */
export const SCAN_THREAD_MIN_BYTES = 256 * 1024;

/** An idle thread is ended after this long (its isolate is ~10 MiB of RSS, measured, an idle API need not hold). */
const RETIRE_IDLE_MS = 10_000;

type Pending = { resolve(r: { check: EnvelopeCheck; body: Buffer }): void; reject(err: Error): void };

/** The check of a body, and the body itself (a new Buffer over the same memory: the one passed in is left empty). */
export interface ScannedBody {
  check: EnvelopeCheck;
  body: Buffer;
}

export class EnvelopeScanThread {
  private readonly worker: Thread;
  private readonly pending = new Map<number, Pending>();
  private readonly ready: Promise<void>;
  private seq = 0;
  private failure: Error | undefined;
  private retireTimer: NodeJS.Timeout | undefined;

  constructor(private readonly retireIdleMs = RETIRE_IDLE_MS) {
    // From dist/ the thread is plain JavaScript; under tsx or vitest it needs tsx's loader again.
    const entry = import.meta.url.endsWith('.ts') ? './envelope-thread-entry.mjs' : './envelope-thread.js';
    this.worker = new Thread(new URL(entry, import.meta.url));
    // The process may exit with this thread running: it holds nothing that must be finished.
    this.worker.unref();
    this.ready = new Promise((resolve, reject) => {
      this.worker.once('message', () => resolve());
      this.worker.once('error', reject);
      this.worker.once('exit', (code) =>
        reject(new Error(`the envelope scan thread exited (${code}) before it was ready`)),
      );
    });
    this.ready.catch(() => undefined);
    this.worker.on('message', (m: ScanReply | { ready: true }) => {
      if (!('id' in m)) return;
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      const body = Buffer.from(m.body.buffer, m.body.byteOffset, m.body.byteLength);
      if (m.ok) p.resolve({ check: m.check, body });
      else p.reject(new Error(m.error));
      this.retireWhenIdle();
    });
    const fail = (err: Error): void => {
      this.failure ??= err;
      for (const p of this.pending.values()) p.reject(this.failure);
      this.pending.clear();
    };
    this.worker.on('error', fail);
    this.worker.on('exit', (code) => fail(new Error(`the envelope scan thread exited (${code})`)));
  }

  /** True once the thread is closed, has died or was retired: start a new one to scan again. */
  get gone(): boolean {
    return this.failure !== undefined;
  }

  /**
   * Checks `body` on the thread. A body that fills its whole ArrayBuffer (what body.ts reads
   * bodies into) moves there and back without a copy and is left empty here: use the returned
   * `body`. Rejects only when the thread is gone or the scanner itself threw (a bug, not bad data).
   */
  async scan(body: Buffer): Promise<ScannedBody> {
    if (this.failure) throw this.failure;
    await this.ready;
    if (this.failure) throw this.failure;
    clearTimeout(this.retireTimer);
    const id = ++this.seq;
    const movable =
      body.byteOffset === 0 && body.byteLength === body.buffer.byteLength && body.buffer instanceof ArrayBuffer;
    return new Promise<ScannedBody>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, body } satisfies ScanRequest, movable ? [body.buffer as ArrayBuffer] : []);
    });
  }

  private retireWhenIdle(): void {
    if (this.pending.size > 0 || this.failure) return;
    clearTimeout(this.retireTimer);
    this.retireTimer = setTimeout(() => {
      if (this.pending.size > 0 || this.failure) return;
      // Retiring an idle thread: a close that fails leaves it to end with the process.
      void this.close().catch(() => undefined);
    }, this.retireIdleMs);
    this.retireTimer.unref();
  }

  /** Ends the thread; scans still waiting fail. Idempotent. */
  async close(): Promise<void> {
    clearTimeout(this.retireTimer);
    this.failure ??= new Error('the envelope scan thread is closed');
    await this.worker.terminate();
  }
}

let shared: EnvelopeScanThread | undefined;

/** The process' one scan thread, started when first needed and again once it is gone (retired or dead). */
export function envelopeScanThread(): EnvelopeScanThread {
  if (!shared || shared.gone) shared = new EnvelopeScanThread();
  return shared;
}
