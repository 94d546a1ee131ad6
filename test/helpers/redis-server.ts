import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnRedisServer } from '../../shared/private-redis.js';

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
export async function startRedisServer(opts: { port?: number; dir?: string; args?: readonly string[] } = {}): Promise<RedisServer> {
  const port = opts.port ?? (await freePort());
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'ingest-redis-'));
  const server = await spawnRedisServer({ port, dir, args: ['--save', '', '--appendonly', 'no', ...(opts.args ?? [])] });
  let stopping: Promise<void> | undefined;
  return {
    url: server.url,
    port,
    dir,
    process: server.child,
    stop(stopOpts = {}) {
      return (stopping ??= server.stop(stopOpts.signal).then(() => {
        if (!stopOpts.keepDir && !opts.dir) rmSync(dir, { recursive: true, force: true });
      }));
    },
  };
}

/** Redis' MONITOR feed on its own socket: each line as Redis prints it (`+<time> [<db> <client>] "cmd" "arg" …`). */
export interface RedisMonitor {
  lines: string[];
  stop(): void;
}

/**
 * Starts MONITOR on a plain TCP connection to a `redis://host:port` URL and resolves once Redis
 * has confirmed it (ioredis' own `monitor()` can misread replies that arrive with its
 * confirmation on a busy server). Bounded: gives up after 5 s.
 */
export async function monitorRedis(url: string): Promise<RedisMonitor> {
  const u = new URL(url);
  const socket = net.connect({ host: u.hostname, port: Number(u.port || 6379) });
  const lines: string[] = [];
  let buffered = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('MONITOR not confirmed within 5 s')), 5000);
    socket.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    socket.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      const parts = buffered.split('\r\n');
      buffered = parts.pop() ?? '';
      for (const line of parts) {
        if (line === '+OK') {
          clearTimeout(timer);
          resolve();
        } else lines.push(line);
      }
    });
    socket.write('MONITOR\r\n');
  });
  return { lines, stop: () => socket.destroy() };
}
