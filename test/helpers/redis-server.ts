import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnRedisServer } from '../../shared/redis/private-server.js';

/**
 * A free TCP port on 127.0.0.1 for a server a test starts itself (a spawned service, a
 * redis-server), taken at random below the kernel's ephemeral range
 * (/proc/sys/net/ipv4/ip_local_port_range; 32768 when unreadable) and checked by binding it.
 * Not a port the OS picks (`listen(0)`): that one is free again once the check closes it, and the
 * OS hands it to the next `listen(0)` or outgoing connection of any process. A clean-clone run
 * lost a test that way: another file's in-process API was given the port first and answered the
 * spawned API's pushes. Below the range only another freePort caller can pick the same port.
 */
export async function freePort(opts: { alsoFree?: number } = {}): Promise<number> {
  // `alsoFree`: port + alsoFree must be free and below the range too (a Redis Cluster node's bus port).
  const extra = opts.alsoFree ?? 0;
  const high = ephemeralLow() - extra;
  const low = Math.max(1024, high - 12_000);
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low));
    if ((await bindable(port)) && (extra === 0 || (await bindable(port + extra)))) return port;
  }
  throw new Error(`no free port found in ${low}-${high - 1} after 50 tries`);
}

function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 2048 ? low : 32768;
  } catch {
    return 32768;
  }
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
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
export async function startRedisServer(
  opts: { port?: number; dir?: string; args?: readonly string[] } = {},
): Promise<RedisServer> {
  const port = opts.port ?? (await freePort());
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'ingest-redis-'));
  const server = await spawnRedisServer({
    port,
    dir,
    args: ['--save', '', '--appendonly', 'no', ...(opts.args ?? [])],
  });
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
