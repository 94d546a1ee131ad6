/**
 * A worker thread that turns the API's prepared batches (stamped Arrow IPC streams) into Parquet
 * files: parquet-wasm's encode of a 1,000-event batch holds a thread for about 2 ms, and on the
 * API's event loop that time is taken from every other push. The scan stays on the event loop
 * (it is the push's check, answered before anything is queued); only the encode moves here.
 * An encoder process encodes its large batches in one too, so that the wasm memory they grow is
 * given back when the thread is retired (EncodeThreadOptions.retireAboveWasmBytes).
 */
import { Worker as Thread } from 'node:worker_threads';
import type { ParquetCompression } from './compression.js';
import type { EncodeReply, EncodeRequest } from './encode-thread.js';

type Pending = { resolve(file: Uint8Array): void; reject(err: Error): void };

/**
 * The services' `retireAboveWasmBytes`: parquet-wasm's memory after batches of up to 1 MiB of
 * ordinary events is 3-6 MiB (measured: 100 events 3.4, 1,000 events 5.1, 1 MB 6.1 MiB); 100,000
 * tiny events (1.1 MB) take it to 18 MiB, an 8 MB batch to 16-35 MiB.
 */
export const RETIRE_ABOVE_WASM_BYTES = 16 * 1024 * 1024;

export interface EncodeThreadOptions {
  /**
   * parquet-wasm's memory grows to what the largest batch needed and never shrinks. A thread whose
   * wasm memory is above this many bytes once it has been idle (nothing pending) for
   * `retireIdleMs` is retired: it ends and gives its memory back, and
   * {@link ParquetEncodeThread.gone} turns true so the owner starts a fresh one when it next needs
   * one. Retiring only when idle keeps a run of large batches from paying a thread start (about
   * 0.35 s of CPU: apache-arrow and the wasm module are loaded again) each. Default: never.
   */
  retireAboveWasmBytes?: number;
  /** How long a thread over `retireAboveWasmBytes` must be idle before it is retired. Default 1000 ms. */
  retireIdleMs?: number;
}

export class ParquetEncodeThread {
  private readonly worker: Thread;
  private readonly pending = new Map<number, Pending>();
  private readonly ready: Promise<void>;
  private seq = 0;
  /** Set once the thread is gone (closed, or crashed): every encode then fails at once. */
  private failure: Error | undefined;
  /** Set once the thread is retired (see EncodeThreadOptions.retireAboveWasmBytes). */
  private retiring = false;
  private retireTimer: NodeJS.Timeout | undefined;
  /** parquet-wasm's memory in the thread after its last encode. */
  private lastWasmBytes = 0;

  constructor(private readonly opts: EncodeThreadOptions = {}) {
    // From dist/ the thread is plain JavaScript; under tsx or vitest it needs tsx's loader again.
    const entry = import.meta.url.endsWith('.ts') ? './encode-thread-entry.mjs' : './encode-thread.js';
    this.worker = new Thread(new URL(entry, import.meta.url));
    // The API's process may exit with this thread running (its own shutdown closes it first).
    this.worker.unref();
    this.ready = new Promise((resolve, reject) => {
      this.worker.once('message', () => resolve());
      this.worker.once('error', reject);
      this.worker.once('exit', (code) =>
        reject(new Error(`the Parquet encode thread exited (${code}) before it was ready`)),
      );
    });
    // A start that fails is reported by encode(); nothing else waits for `ready`.
    this.ready.catch(() => undefined);
    this.worker.on('message', (m: EncodeReply | { ready: true }) => {
      if (!('id' in m)) return;
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      this.lastWasmBytes = m.wasmBytes;
      if (m.ok) p.resolve(m.file);
      else p.reject(new Error(m.error));
      this.retireWhenIdle();
    });
    const fail = (err: Error): void => {
      this.failure ??= err;
      for (const p of this.pending.values()) p.reject(this.failure);
      this.pending.clear();
    };
    this.worker.on('error', fail);
    this.worker.on('exit', (code) => fail(new Error(`the Parquet encode thread exited (${code})`)));
  }

  /** True once the thread is closed, has died, or is retired (see EncodeThreadOptions): make a new one to encode again. */
  get gone(): boolean {
    return this.failure !== undefined || this.retiring;
  }

  /** parquet-wasm's memory in the thread after its last encode (0 before the first). */
  get wasmBytes(): number {
    return this.lastWasmBytes;
  }

  /** Batches sent to the thread and not yet answered. */
  get inFlight(): number {
    return this.pending.size;
  }

  /**
   * The Parquet file of a stamped IPC stream. The bytes are copied to the thread and the caller
   * keeps its own; with `transfer` (a stream that fills its whole ArrayBuffer) they move without a
   * copy, and `ipc` is left empty. `compression`: the collection's codec (default: the writer's default).
   */
  async encode(
    ipc: Uint8Array,
    opts: { transfer?: boolean; compression?: ParquetCompression } = {},
  ): Promise<Uint8Array> {
    if (this.failure) throw this.failure;
    await this.ready;
    if (this.failure) throw this.failure;
    clearTimeout(this.retireTimer);
    const id = ++this.seq;
    const movable =
      opts.transfer === true &&
      ipc.byteOffset === 0 &&
      ipc.byteLength === ipc.buffer.byteLength &&
      ipc.buffer instanceof ArrayBuffer;
    return new Promise<Uint8Array>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage(
        {
          id,
          ipc,
          ...(opts.compression === undefined ? {} : { compression: opts.compression }),
        } satisfies EncodeRequest,
        movable ? [ipc.buffer as ArrayBuffer] : [],
      );
    });
  }

  /** Once idle for retireIdleMs with its wasm memory over retireAboveWasmBytes, the thread ends. */
  private retireWhenIdle(): void {
    const limit = this.opts.retireAboveWasmBytes;
    if (limit === undefined || this.lastWasmBytes <= limit || this.pending.size > 0 || this.failure) return;
    clearTimeout(this.retireTimer);
    this.retireTimer = setTimeout(() => {
      if (this.pending.size > 0 || this.failure) return;
      this.retiring = true;
      // Retiring an idle thread: a close that fails leaves it to end with the process; the next encode starts a new one.
      void this.close().catch(() => undefined);
    }, this.opts.retireIdleMs ?? 1000);
    this.retireTimer.unref();
  }

  /** Stops the thread; encodes still waiting fail (their pushes fall back to the JSON payload). */
  async close(): Promise<void> {
    clearTimeout(this.retireTimer);
    this.failure ??= new Error('the Parquet encode thread is closed');
    await this.worker.terminate();
  }
}

/**
 * An owner's one encode thread, started when first needed and again once it is gone (retired or
 * dead): an idle owner whose thread was retired holds no thread and no wasm memory.
 */
export class EncodeThreadHolder {
  private thread: ParquetEncodeThread | undefined;

  constructor(private readonly opts: EncodeThreadOptions = {}) {}

  /** The live thread, started if there is none (a bound function: pass it as `encodeThread`). */
  readonly get = (): ParquetEncodeThread => {
    if (!this.thread || this.thread.gone) this.thread = new ParquetEncodeThread(this.opts);
    return this.thread;
  };

  /** Closes the thread, if one runs; a later `get` starts a new one. */
  async close(): Promise<void> {
    const thread = this.thread;
    this.thread = undefined;
    await thread?.close();
  }
}
