/**
 * The thread of a {@link ParquetEncodeThread} (./encode-thread-pool.ts): turns stamped Arrow IPC
 * streams into Parquet files, one message at a time, so the API's event loop does not run
 * parquet-wasm itself.
 */
import { parentPort } from 'node:worker_threads';
import { wasmMemory } from 'parquet-wasm';
import { type ParquetCompression, ipcToParquet } from './encode.js';

export interface EncodeRequest {
  id: number;
  ipc: Uint8Array;
  /** The collection's codec; absent: the default. */
  compression?: ParquetCompression;
}
/** `wasmBytes`: parquet-wasm's memory after the encode (it grows to the largest batch and never shrinks). */
export type EncodeReply =
  | { id: number; ok: true; file: Uint8Array; wasmBytes: number }
  | { id: number; ok: false; error: string; wasmBytes: number };

const port = parentPort;
if (!port) throw new Error('encode-thread.ts runs as a worker thread only');
port.on('message', (m: EncodeRequest) => {
  let reply: EncodeReply;
  try {
    reply = {
      id: m.id,
      ok: true,
      file: ipcToParquet(m.ipc, m.compression === undefined ? {} : { compression: m.compression }),
      wasmBytes: wasmBytes(),
    };
  } catch (err) {
    port.postMessage({
      id: m.id,
      ok: false,
      error: (err as Error).message,
      wasmBytes: wasmBytes(),
    } satisfies EncodeReply);
    return;
  }
  // The file's buffer moves to the API's thread without a copy.
  port.postMessage(reply, reply.ok ? [reply.file.buffer as ArrayBuffer] : []);
});
port.postMessage({ ready: true });

function wasmBytes(): number {
  return (wasmMemory() as WebAssembly.Memory).buffer.byteLength;
}
