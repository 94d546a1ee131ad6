import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

/** A free TCP port on 127.0.0.1 (the OS picks it). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

export interface RedisServer {
  url: string;
  port: number;
  dir: string;
  process: ChildProcess;
  /** Stops the server (SIGTERM, then SIGKILL) and removes its folder unless `keepDir`. Idempotent. */
  stop(opts?: { keepDir?: boolean; signal?: NodeJS.Signals }): Promise<void>;
}

/**
 * Starts a private `redis-server` on a free loopback port, so tests never depend on (or
 * disturb) a Redis that happens to run on this machine.
 */
export async function startRedisServer(opts: { port?: number; dir?: string; args?: string[] } = {}): Promise<RedisServer> {
  const port = opts.port ?? (await freePort());
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'ingest-redis-'));
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--daemonize', 'no', ...(opts.args ?? [])], {
    stdio: 'ignore',
  });
  let exited = false;
  child.once('exit', () => (exited = true));
  child.once('error', () => (exited = true));
  const url = `redis://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (exited) throw new Error('redis-server exited at start (is it installed? apt-get install redis-server)');
    const probe = new Redis(url, { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: 300 });
    probe.on('error', () => undefined);
    const ok = await probe
      .connect()
      .then(() => probe.ping())
      .then(() => true)
      .catch(() => false);
    probe.disconnect();
    if (ok) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`redis-server on ${url} did not answer within 10 s`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  let stopping: Promise<void> | undefined;
  return {
    url,
    port,
    dir,
    process: child,
    stop(stopOpts = {}) {
      stopping ??= new Promise<void>((resolve) => {
        const done = (): void => {
          if (!stopOpts.keepDir && !opts.dir) rmSync(dir, { recursive: true, force: true });
          resolve();
        };
        if (exited) return done();
        const t = setTimeout(() => child.kill('SIGKILL'), 5000);
        child.once('exit', () => {
          clearTimeout(t);
          done();
        });
        child.kill(stopOpts.signal ?? 'SIGTERM');
      });
      return stopping;
    },
  };
}
