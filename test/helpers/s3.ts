import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { S3ObjectStore } from '../../shared/store/s3/index.js';

/** s3rver's fixed account: it accepts signatures made with these and nothing else. */
export const S3RVER_CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } as const;

const BUCKET = 'test-bucket';
const START_TIMEOUT_MS = 15_000;
const STOP_TIMEOUT_MS = 5_000;
/** Enough of the child's stderr to explain a failed start. */
const STDERR_KEEP_CHARS = 4_000;

/**
 * Runs inside the child: starts s3rver, prints `{"port":N}`, and exits when
 * its stdin closes, so the server dies with the test process even if
 * `close()` is never reached.
 */
const CHILD_SOURCE = `
'use strict';
const [s3rverPath, directory, bucket] = process.argv.slice(1);
const S3rver = require(s3rverPath);
const server = new S3rver({
  address: '127.0.0.1',
  port: 0,
  directory,
  silent: true,
  configureBuckets: [{ name: bucket }],
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
server.run().then(
  ({ port }) => process.stdout.write(JSON.stringify({ port }) + '\\n'),
  (err) => { console.error(err); process.exit(1); },
);
`;

export interface S3TestServer {
  /** `http://127.0.0.1:<port>` */
  endpoint: string;
  /** A bucket that already exists. */
  bucket: string;
  /** The server's private data directory. */
  dir: string;
  /** Stops the server and deletes `dir`; safe to call more than once. */
  close(): Promise<void>;
}

/**
 * Starts s3rver on 127.0.0.1 on a free port with a fresh temp directory and
 * one bucket, logging nothing. Call `close()` when done.
 *
 * s3rver runs in a child process started with `--openssl-legacy-provider`:
 * it signs ListObjectsV2 continuation tokens with DES, which OpenSSL 3 (Node
 * 17+) refuses by default, so in-process every truncated listing (any
 * `limit` below the number of keys) fails with a 500.
 */
export async function startS3Server(): Promise<S3TestServer> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 's3rver-'));
  const s3rverPath = createRequire(import.meta.url).resolve('s3rver');
  const child = spawn(
    process.execPath,
    ['--openssl-legacy-provider', '-e', CHILD_SOURCE, '--', s3rverPath, dir, BUCKET],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );

  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-STDERR_KEEP_CHARS);
  });

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      try {
        await stopChild(child);
      } catch {
        // The process is gone or unkillable; removing the directory below still matters.
      }
      try {
        await rm(dir, { recursive: true, force: true });
      } catch {
        // A leftover temp dir is not worth failing a test run over.
      }
    })();
    return closing;
  };

  let port: number;
  try {
    port = await readPort(child.stdout, child, () => stderr);
  } catch (err) {
    await close();
    throw err;
  }
  return { endpoint: `http://127.0.0.1:${port}`, bucket: BUCKET, dir, close };
}

/** An `S3ObjectStore` for `server` (path style, us-east-1, s3rver credentials), optionally under a key prefix. */
export function s3StoreFor(server: Pick<S3TestServer, 'endpoint' | 'bucket'>, prefix?: string): S3ObjectStore {
  return new S3ObjectStore({
    bucket: server.bucket,
    prefix,
    endpoint: server.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { ...S3RVER_CREDENTIALS },
  });
}

type Child = ReturnType<typeof spawn>;

/** Waits (bounded) for the child's `{"port":N}` line; rejects if it exits or stays silent. */
function readPort(stdout: NodeJS.ReadableStream, child: Child, stderr: () => string): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    let buffered = '';
    const finish = (err: Error | undefined, port?: number): void => {
      clearTimeout(timer);
      stdout.off('data', onData);
      child.off('exit', onExit);
      child.off('error', onError);
      if (err !== undefined) reject(err);
      else resolve(port ?? 0);
    };
    const onData = (chunk: Buffer | string): void => {
      buffered += chunk.toString();
      const newline = buffered.indexOf('\n');
      if (newline === -1) return;
      const line = buffered.slice(0, newline);
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        parsed = undefined;
      }
      const port = typeof parsed === 'object' && parsed !== null ? (parsed as { port?: unknown }).port : undefined;
      if (typeof port === 'number' && port > 0) finish(undefined, port);
      else finish(new Error(`s3rver child printed an unexpected line: ${line}`));
    };
    const onExit = (code: number | null): void =>
      finish(new Error(`s3rver child exited (code ${String(code)}) before listening: ${stderr()}`));
    const onError = (err: Error): void => finish(err);
    const timer = setTimeout(
      () => finish(new Error(`s3rver did not start within ${START_TIMEOUT_MS} ms: ${stderr()}`)),
      START_TIMEOUT_MS,
    );
    stdout.on('data', onData);
    child.once('exit', onExit);
    child.once('error', onError);
  });
}

/** Closes the child's stdin (it exits on its own), escalating to SIGKILL if it lingers. */
async function stopChild(child: Child): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.stdin?.end();
  if (await exitsWithin(exited, STOP_TIMEOUT_MS)) return;
  child.kill('SIGKILL');
  await exitsWithin(exited, STOP_TIMEOUT_MS);
}

/** Whether `exited` settles within `ms`; the timer is always cleared so it never holds the test process open. */
async function exitsWithin(exited: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([
      exited.then(
        () => true,
        () => true,
      ),
      timedOut,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
