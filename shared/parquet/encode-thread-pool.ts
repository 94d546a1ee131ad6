/**
 * A worker thread that turns the API's prepared batches (stamped Arrow IPC streams) into Parquet
 * files: parquet-wasm's encode of a 1,000-event batch holds a thread for about 2 ms, and on the
 * API's event loop that time is taken from every other push. The scan stays on the event loop
 * (it is the push's check, answered before anything is queued); only the encode moves here.
 * An encoder process encodes its large batches in one too, so that the wasm memory they grow is
 * given back when the thread is retired (EncodeThreadOptions.retireAboveWasmBytes).
 */
import { RequestThread, ownsItsBuffer, threadEntry } from '../request-thread.js';
import type { ParquetCompression } from './compression.js';
import type { EncodeReply, EncodeRequest } from './encode-thread.js';

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
  private readonly thread: RequestThread<EncodeReply>;
  /** parquet-wasm's memory in the thread after its last encode. */
  private lastWasmBytes = 0;

  constructor(private readonly opts: EncodeThreadOptions = {}) {
    this.thread = new RequestThread<EncodeReply>(
      threadEntry(import.meta.url, 'encode-thread'),
      'the Parquet encode thread',
      (reply) => {
        this.lastWasmBytes = reply.wasmBytes;
      },
    );
  }

  /** True once the thread is closed, has died, or is retired (see EncodeThreadOptions): make a new one to encode again. */
  get gone(): boolean {
    return this.thread.gone;
  }

  /** parquet-wasm's memory in the thread after its last encode (0 before the first). */
  get wasmBytes(): number {
    return this.lastWasmBytes;
  }

  /** Batches sent to the thread and not yet answered. */
  get inFlight(): number {
    return this.thread.inFlight;
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
    const request: Omit<EncodeRequest, 'id'> = {
      ipc,
      ...(opts.compression === undefined ? {} : { compression: opts.compression }),
    };
    try {
      const reply = await this.thread.request(
        request,
        opts.transfer === true && ownsItsBuffer(ipc) ? [ipc.buffer as ArrayBuffer] : [],
      );
      if (!reply.ok) throw new Error(reply.error);
      return reply.file;
    } finally {
      this.retireWhenIdle();
    }
  }

  /** Once idle for retireIdleMs with its wasm memory over retireAboveWasmBytes, the thread ends. */
  private retireWhenIdle(): void {
    const limit = this.opts.retireAboveWasmBytes;
    if (limit === undefined || this.lastWasmBytes <= limit) return;
    this.thread.retireWhenIdle(this.opts.retireIdleMs ?? 1000);
  }

  /** Stops the thread; encodes still waiting fail (their pushes fall back to the JSON payload). */
  close(): Promise<void> {
    return this.thread.close();
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
