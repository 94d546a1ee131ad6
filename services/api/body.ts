import type { Request } from 'express';
import { HttpError } from '../../shared/errors.js';

/**
 * Reads the whole request body, refusing it from Content-Length before reading and while
 * streaming when there is none, so an oversized body never sits in memory.
 */
export async function readBody(req: Request, maxBytes: number): Promise<Buffer> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > maxBytes) {
    const headers = await discardRest(req, Number(declared));
    throw new HttpError(413, `body of ${declared} bytes is over this collection's limit of ${maxBytes} bytes`, headers);
  }
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (err: Error | null, value?: Buffer, settle = true): void => {
      if (done) return;
      done = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
      if (!settle) return;
      if (err) reject(err);
      else resolve(value as Buffer);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > maxBytes) {
        // Detach first (finish is a no-op afterwards), answer once the rest is drained.
        finish(null, undefined, false);
        chunks.length = 0;
        void discardRest(req, Number.NaN).then((headers) => reject(new HttpError(413, `body is over this collection's limit of ${maxBytes} bytes`, headers)));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = (): void => finish(null, Buffer.concat(chunks, size));
    const onError = (err: Error): void => finish(new HttpError(400, `request body could not be read: ${err.message}`));
    const onAborted = (): void => finish(new HttpError(400, 'request aborted'));
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onAborted);
  });
}

/** A refused body is read and dropped up to this much, for at most this long; past either the connection is closed. */
const DRAIN_LIMIT_BYTES = 32 * 1024 * 1024;
const DRAIN_LIMIT_MS = 5000;

/**
 * Reads and drops the rest of a refused body before the 413 goes out. Answering while the client
 * is still sending makes Node close the socket under it; the client's next write draws a reset and
 * the 413 is lost (the client sees EPIPE/ECONNRESET instead). A body declared larger than
 * DRAIN_LIMIT_BYTES, or one that takes longer than DRAIN_LIMIT_MS, is answered at once with
 * `Connection: close`. Resolves with the headers the answer needs.
 */
function discardRest(req: Request, declared: number): Promise<Record<string, string>> {
  const close = { Connection: 'close' };
  if (declared > DRAIN_LIMIT_BYTES || req.complete) return Promise.resolve(req.complete ? {} : close);
  return new Promise((resolve) => {
    let dropped = 0;
    const done = (headers: Record<string, string>): void => {
      clearTimeout(timer);
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
    };
    const onEnd = (): void => done({});
    const timer = setTimeout(() => done(close), DRAIN_LIMIT_MS);
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onEnd);
    req.resume();
  });
}

/** True when the request's Content-Type (without parameters) is one of `allowed`. */
export function contentTypeAllowed(header: string | undefined, allowed: readonly string[]): boolean {
  if (!header) return false;
  const [type, ...params] = header.split(';').map((s) => s.trim().toLowerCase());
  if (!type || !allowed.some((a) => a.toLowerCase() === type)) return false;
  // JSON is UTF-8 by definition (RFC 8259); any other declared charset is refused.
  const charset = params.find((p) => p.startsWith('charset='));
  return !charset || /^charset="?utf-?8"?$/.test(charset);
}
