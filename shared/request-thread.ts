/**
 * A worker thread that answers each request with one reply carrying the request's id: the
 * plumbing shared by the API's and encoder's Parquet encode thread (shared/parquet/encode-thread-pool.ts)
 * and the push-body scan thread (shared/envelope-scan-thread.ts). It waits for the thread's
 * `{ready: true}`, matches replies to requests, fails every waiting request once the thread errors,
 * exits or is closed, and can be retired after a stretch with nothing pending.
 */
import { Worker as Thread } from 'node:worker_threads';

/** What every reply carries: the request's id, and the error's message when `ok` is false. */
export type ThreadReply = { id: number; ok: true } | { id: number; ok: false; error: string };

type Pending<R> = { resolve(reply: R): void; reject(err: Error): void };

/**
 * The thread script: a `.js` beside the compiled caller, or under tsx and vitest the `-entry.mjs`
 * that loads the `.ts` through tsx's loader again.
 */
export function threadEntry(callerUrl: string, name: string): URL {
  return new URL(callerUrl.endsWith('.ts') ? `./${name}-entry.mjs` : `./${name}.js`, callerUrl);
}

export class RequestThread<R extends ThreadReply> {
  private readonly worker: Thread;
  private readonly pending = new Map<number, Pending<R>>();
  private readonly ready: Promise<void>;
  private seq = 0;
  /** Set once the thread is gone (closed, retired, or crashed): every request then fails at once. */
  private failure: Error | undefined;
  private retireTimer: NodeJS.Timeout | undefined;

  /**
   * `what` names the thread in errors ("the Parquet encode thread"). `onReply` sees every reply
   * (ok or not) before its request settles.
   */
  constructor(
    entry: URL,
    private readonly what: string,
    private readonly onReply?: (reply: R) => void,
  ) {
    this.worker = new Thread(entry);
    // The process may exit with this thread running: its owner closes it on shutdown, and it
    // holds nothing that must be finished.
    this.worker.unref();
    this.ready = new Promise((resolve, reject) => {
      this.worker.once('message', () => resolve());
      this.worker.once('error', reject);
      this.worker.once('exit', (code) => reject(new Error(`${what} exited (${code}) before it was ready`)));
    });
    // A start that fails is reported by request(); nothing else waits for `ready`.
    this.ready.catch(() => undefined);
    this.worker.on('message', (m: R | { ready: true }) => {
      if (!('id' in m)) return;
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      this.onReply?.(m);
      if (m.ok) p.resolve(m);
      else p.reject(new Error(m.error));
    });
    const fail = (err: Error): void => {
      this.failure ??= err;
      for (const p of this.pending.values()) p.reject(this.failure);
      this.pending.clear();
    };
    this.worker.on('error', fail);
    this.worker.on('exit', (code) => fail(new Error(`${what} exited (${code})`)));
  }

  /** True once the thread is closed, retired or dead: its owner starts a new one to go on. */
  get gone(): boolean {
    return this.failure !== undefined;
  }

  /** Requests sent and not yet answered. */
  get inFlight(): number {
    return this.pending.size;
  }

  /**
   * Sends `message` with a fresh id; `transfer` lists buffers that move to the thread (left empty
   * here). Resolves with an ok reply; rejects with the reply's error, or once the thread is gone.
   */
  async request(message: object, transfer: ArrayBuffer[] = []): Promise<R> {
    if (this.failure) throw this.failure;
    await this.ready;
    if (this.failure) throw this.failure;
    clearTimeout(this.retireTimer);
    const id = ++this.seq;
    return new Promise<R>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ ...message, id }, transfer);
    });
  }

  /** Ends the thread once nothing has been pending for `idleMs` (a new request cancels this). */
  retireWhenIdle(idleMs: number): void {
    if (this.pending.size > 0 || this.failure) return;
    clearTimeout(this.retireTimer);
    this.retireTimer = setTimeout(() => {
      if (this.pending.size > 0 || this.failure) return;
      // Retiring an idle thread: a terminate that fails leaves it to end with the process; the
      // owner's next request starts a new one (`gone` is already true).
      void this.close().catch(() => undefined);
    }, idleMs);
    this.retireTimer.unref();
  }

  /** Ends the thread; requests still waiting fail. Idempotent. */
  async close(): Promise<void> {
    clearTimeout(this.retireTimer);
    this.failure ??= new Error(`${this.what} is closed`);
    await this.worker.terminate();
  }
}

/** True when `bytes` fill their whole ArrayBuffer, so the buffer can move to a thread without taking other data with it. */
export function ownsItsBuffer(bytes: Uint8Array): boolean {
  return bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength && bytes.buffer instanceof ArrayBuffer;
}
