/**
 * A worker thread that turns the API's prepared batches (stamped Arrow IPC streams) into Parquet
 * files: parquet-wasm's encode of a 1,000-event batch holds a thread for about 2 ms, and on the
 * API's event loop that time is taken from every other push. The scan stays on the event loop
 * (it is the push's check, answered before anything is queued); only the encode moves here.
 */
import { Worker } from 'node:worker_threads';
import type { EncodeReply } from './encode-thread.js';

type Pending = { resolve(file: Uint8Array): void; reject(err: Error): void };

export class ParquetEncodeThread {
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private readonly ready: Promise<void>;
  private seq = 0;
  /** Set once the thread is gone (closed, or crashed): every encode then fails at once. */
  private failure: Error | undefined;

  constructor() {
    // From dist/ the thread is plain JavaScript; under tsx or vitest it needs tsx's loader again.
    const entry = import.meta.url.endsWith('.ts') ? './encode-thread-entry.mjs' : './encode-thread.js';
    this.worker = new Worker(new URL(entry, import.meta.url));
    // The API's process may exit with this thread running (its own shutdown closes it first).
    this.worker.unref();
    this.ready = new Promise((resolve, reject) => {
      this.worker.once('message', () => resolve());
      this.worker.once('error', reject);
      this.worker.once('exit', (code) => reject(new Error(`the Parquet encode thread exited (${code}) before it was ready`)));
    });
    // A start that fails is reported by encode(); nothing else waits for `ready`.
    this.ready.catch(() => undefined);
    this.worker.on('message', (m: EncodeReply | { ready: true }) => {
      if (!('id' in m)) return;
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.ok) p.resolve(m.file);
      else p.reject(new Error(m.error));
    });
    const fail = (err: Error): void => {
      this.failure ??= err;
      for (const p of this.pending.values()) p.reject(this.failure);
      this.pending.clear();
    };
    this.worker.on('error', fail);
    this.worker.on('exit', (code) => fail(new Error(`the Parquet encode thread exited (${code})`)));
  }

  /** True once the thread is closed or has died: make a new one to encode again. */
  get gone(): boolean {
    return this.failure !== undefined;
  }

  /** Batches sent to the thread and not yet answered. */
  get inFlight(): number {
    return this.pending.size;
  }

  /** The Parquet file of a stamped IPC stream (the bytes are copied to the thread; the caller keeps its own). */
  async encode(ipc: Uint8Array): Promise<Uint8Array> {
    if (this.failure) throw this.failure;
    await this.ready;
    if (this.failure) throw this.failure;
    const id = ++this.seq;
    return new Promise<Uint8Array>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, ipc });
    });
  }

  /** Stops the thread; encodes still waiting fail (their pushes fall back to the JSON payload). */
  async close(): Promise<void> {
    this.failure ??= new Error('the Parquet encode thread is closed');
    await this.worker.terminate();
  }
}
