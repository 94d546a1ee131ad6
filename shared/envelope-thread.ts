/**
 * The thread of an {@link EnvelopeScanThread} (./envelope-scan-thread.ts): runs the push check
 * ({@link checkEnvelope}) on large bodies, or for a body the API encodes itself the prepare scan
 * ({@link prepareBatchData}: the same check, which also copies the columns into an Arrow IPC
 * stream), one message at a time, so that the API's event loop does not. The body arrives moved
 * (not copied) and goes back the same way with the result; a prepared stream moves too.
 */
import { parentPort } from 'node:worker_threads';
import { type EnvelopeCheck, checkEnvelope } from './envelope.js';
import type { PreparedData } from './parquet/encode.js';

export interface ScanRequest {
  id: number;
  body: Uint8Array;
  /** Prepare (check and take the columns) rather than only check. */
  prepare?: boolean;
  /** With `prepare`: a body of more events than this is only checked (its `check` comes back, not `prepared`). */
  maxRows?: number;
}

/** The check or the prepared data (or the message of a scanner bug) and the body, moved back. */
export type ScanReply =
  | { id: number; ok: true; check: EnvelopeCheck; body: Uint8Array }
  | { id: number; ok: true; prepared: PreparedData; body: Uint8Array }
  | { id: number; ok: false; error: string; body: Uint8Array };

const owns = (b: Uint8Array): boolean => b.byteOffset === 0 && b.byteLength === b.buffer.byteLength;

const port = parentPort;
if (!port) throw new Error('envelope-thread.ts runs as a worker thread only');
/*
 * The prepare scan's module (with apache-arrow and parquet-wasm, compiled on import) is loaded on
 * the first prepare only: a thread that only checks stays small. Messages are handled in order.
 */
let encode: Promise<typeof import('./parquet/encode.js')> | undefined;
let queue: Promise<void> = Promise.resolve();
port.on('message', (m: ScanRequest) => {
  queue = queue.then(() => handle(m));
});

async function handle(m: ScanRequest): Promise<void> {
  if (!port) return;
  let reply: ScanReply;
  const transfer: ArrayBuffer[] = owns(m.body) ? [m.body.buffer as ArrayBuffer] : [];
  try {
    if (m.prepare) {
      const prepared = (await (encode ??= import('./parquet/encode.js'))).prepareBatchData(m.body, m.maxRows);
      if (prepared === null) reply = { id: m.id, ok: true, check: checkEnvelope(m.body), body: m.body };
      else {
        if (prepared.ok && owns(prepared.ipc)) transfer.push(prepared.ipc.buffer as ArrayBuffer);
        reply = { id: m.id, ok: true, prepared, body: m.body };
      }
    } else reply = { id: m.id, ok: true, check: checkEnvelope(m.body), body: m.body };
  } catch (err) {
    reply = { id: m.id, ok: false, error: (err as Error).message, body: m.body };
  }
  port.postMessage(reply, transfer);
}
port.postMessage({ ready: true });
