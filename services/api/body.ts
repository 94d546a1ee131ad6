import type { Request } from 'express';
import { HttpError } from '../../shared/errors.js';

/**
 * Reads the whole request body, refusing it from Content-Length before reading and while
 * streaming when there is none, so an oversized body never sits in memory.
 */
export async function readBody(req: Request, maxBytes: number): Promise<Buffer> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > maxBytes) {
    throw new HttpError(413, `body of ${declared} bytes is over this collection's limit of ${maxBytes} bytes`, { Connection: 'close' });
  }
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (err: Error | null, value?: Buffer): void => {
      if (done) return;
      done = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
      if (err) reject(err);
      else resolve(value as Buffer);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > maxBytes) {
        // Discard the rest: the response goes out with Connection: close.
        req.resume();
        finish(new HttpError(413, `body is over this collection's limit of ${maxBytes} bytes`, { Connection: 'close' }));
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

/** True when the request's Content-Type (without parameters) is one of `allowed`. */
export function contentTypeAllowed(header: string | undefined, allowed: readonly string[]): boolean {
  if (!header) return false;
  const [type, ...params] = header.split(';').map((s) => s.trim().toLowerCase());
  if (!type || !allowed.some((a) => a.toLowerCase() === type)) return false;
  // JSON is UTF-8 by definition (RFC 8259); any other declared charset is refused.
  const charset = params.find((p) => p.startsWith('charset='));
  return !charset || /^charset="?utf-?8"?$/.test(charset);
}
