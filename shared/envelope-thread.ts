/**
 * The thread of an {@link EnvelopeScanThread} (./envelope-scan-thread.ts): runs the push check
 * ({@link checkEnvelope}) on large bodies, one message at a time, so that the API's event loop
 * does not. The body arrives moved (not copied) and goes back the same way with the check.
 */
import { parentPort } from 'node:worker_threads';
import { type EnvelopeCheck, checkEnvelope } from './envelope.js';

export interface ScanRequest {
  id: number;
  body: Uint8Array;
}

/** The check (or the message of a scanner bug) and the body, moved back. */
export type ScanReply =
  | { id: number; ok: true; check: EnvelopeCheck; body: Uint8Array }
  | { id: number; ok: false; error: string; body: Uint8Array };

const port = parentPort;
if (!port) throw new Error('envelope-thread.ts runs as a worker thread only');
port.on('message', (m: ScanRequest) => {
  let reply: ScanReply;
  try {
    reply = { id: m.id, ok: true, check: checkEnvelope(m.body), body: m.body };
  } catch (err) {
    reply = { id: m.id, ok: false, error: (err as Error).message, body: m.body };
  }
  const movable = m.body.byteOffset === 0 && m.body.byteLength === m.body.buffer.byteLength;
  port.postMessage(reply, movable ? [m.body.buffer as ArrayBuffer] : []);
});
port.postMessage({ ready: true });
