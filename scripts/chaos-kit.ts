/**
 * Small fault-injection helpers shared by `npm run chaos` and the reliability tests.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import net from 'node:net';
import { Transform } from 'node:stream';
import { resolve } from 'node:path';
import { pollUntil } from '../shared/poll.js';

/** `pass`: forward bytes. `http503`: answer every request with an S3-style 503. `reset`: TCP reset on connect. */
export type FaultMode = 'pass' | 'http503' | 'reset';

const SERVICE_UNAVAILABLE_XML =
  '<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>injected fault</Message></Error>';
const SERVICE_UNAVAILABLE = [
  'HTTP/1.1 503 Service Unavailable',
  'Content-Type: application/xml',
  `Content-Length: ${Buffer.byteLength(SERVICE_UNAVAILABLE_XML)}`,
  'Connection: close',
  '',
  SERVICE_UNAVAILABLE_XML,
].join('\r\n');

/**
 * A TCP proxy on 127.0.0.1 in front of an HTTP server (the S3 server) or a Redis, whose mode can
 * be switched at any time. Switching to a fault drops every live connection too, so pooled
 * keep-alive sockets cannot slip requests through an outage. `holdNext` stalls one connection's
 * requests instead (a server that runs a command late, after the client stopped waiting).
 */
export class FaultProxy {
  mode: FaultMode = 'pass';
  /** Connections answered with a fault since start. */
  faults = 0;
  /** Holds that fired (`holdNext`), and how many of them have been let go. */
  held = 0;
  released = 0;
  private readonly live = new Set<net.Socket>();
  private hold: { marker: string; ms: number } | null = null;

  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  /** Listens on a free loopback port and forwards to `targetPort` on 127.0.0.1. */
  static async start(targetPort: number): Promise<FaultProxy> {
    // The connection handler needs the proxy, which needs the listening server's port.
    const ref: { proxy?: FaultProxy } = {};
    const server = net.createServer((client) => ref.proxy?.accept(client, targetPort));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    ref.proxy = new FaultProxy(server, (server.address() as net.AddressInfo).port);
    return ref.proxy;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /**
   * The next client→server chunk that contains `marker`, and everything its connection sends
   * after it, reach the server `ms` later: in order, nothing dropped. Answers pass at once.
   */
  holdNext(marker: string, ms: number): void {
    this.hold = { marker, ms };
  }

  setMode(mode: FaultMode): void {
    this.mode = mode;
    if (mode !== 'pass') for (const s of this.live) s.destroy();
  }

  private accept(client: net.Socket, targetPort: number): void {
    client.on('error', () => undefined);
    if (this.mode === 'reset') {
      this.faults++;
      client.resetAndDestroy();
      return;
    }
    if (this.mode === 'http503') {
      this.faults++;
      // Answer once the request starts arriving, as a real overloaded server would.
      client.once('data', () => client.end(SERVICE_UNAVAILABLE));
      client.setTimeout(5000, () => client.destroy());
      return;
    }
    const upstream = net.connect(targetPort, '127.0.0.1');
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    this.live.add(client);
    client.once('close', () => this.live.delete(client));
    client.pipe(this.holdPoint()).pipe(upstream).pipe(client);
  }

  /** One connection's client→server stream: passes chunks through, or delays one (and so all after it) once `holdNext` matches. */
  private holdPoint(): Transform {
    let tail = '';
    return new Transform({
      transform: (chunk: Buffer, _enc, done) => {
        const text = tail + chunk.toString('latin1');
        tail = text.slice(-256);
        const hold = this.hold;
        if (!hold || !text.includes(hold.marker)) return done(null, chunk);
        this.hold = null;
        this.held++;
        // The stream hands over no further chunk until this one is done.
        setTimeout(() => {
          this.released++;
          done(null, chunk);
        }, hold.ms);
      },
    });
  }

  /** Stops listening and drops every connection. Idempotent. */
  async close(): Promise<void> {
    for (const s of this.live) s.destroy();
    if (!this.server.listening) return;
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Resolves after `ms`. */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const ROOT = resolve(import.meta.dirname, '..');
/** Enough of a service's output to explain a failure, without growing for the whole run. */
const OUTPUT_KEEP_CHARS = 64 * 1024;

/** A service entry point running in its own Node process. */
export interface Service {
  child: ChildProcess;
  /** The pid of the process that runs the service code (signals reach it directly). */
  pid: number;
  /** The tail of what it printed (stdout + stderr). */
  output(): string;
  /** Exit code, or null when killed by a signal. */
  exited(): Promise<number | null>;
  /** Sends `signal` and waits for the exit (SIGKILL after `ms`). */
  stop(signal?: NodeJS.Signals, ms?: number): Promise<number | null>;
}

/** How long an exited service's output may take to be read to the end. */
const OUTPUT_DRAIN_MS = 2000;

/**
 * Runs an entry point as `node --import tsx <entry>` (a compiled `.js` entry: plain `node <entry>`):
 * one process, so SIGKILL kills the service itself. (The `tsx` CLI runs the code in a child
 * process; killing the CLI with SIGKILL would leave that child running and still holding its port.)
 */
export function spawnService(
  entry: string,
  env: Record<string, string>,
  opts: { keepChars?: number; nodeFlags?: readonly string[] } = {},
): Service {
  const child = spawn(
    process.execPath,
    [...(opts.nodeFlags ?? []), ...(entry.endsWith('.ts') ? ['--import', 'tsx', entry] : [entry])],
    { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const keepChars = opts.keepChars ?? OUTPUT_KEEP_CHARS;
  let out = '';
  const keep = (d: Buffer): void => {
    out += d.toString();
    if (out.length > keepChars) out = out.slice(-keepChars);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  // Resolved once the process exited and its output was read to the end ('close'), so a check of
  // its last log lines sees them; bounded, since a child it started may still hold the pipes.
  const closed = new Promise<void>((r) => child.once('close', () => r()));
  const exit = new Promise<number | null>((r) =>
    child.once('exit', (code) => {
      const t = setTimeout(() => r(code), OUTPUT_DRAIN_MS);
      void closed.then(() => {
        clearTimeout(t);
        r(code);
      });
    }),
  );
  return {
    child,
    pid: child.pid ?? -1,
    output: () => out,
    exited: () => exit,
    async stop(signal = 'SIGTERM', ms = 20_000) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill(signal);
      const t = setTimeout(() => child.kill('SIGKILL'), ms);
      const code = await exit;
      clearTimeout(t);
      return code;
    },
  };
}

/** Polls `url` until it answers 200, failing early if `svc` exits (bounded by `ms`). */
export async function waitHttpOk(url: string, ms: number, svc?: Service): Promise<void> {
  try {
    await pollUntil(
      async () => {
        const r = await fetch(url, { signal: AbortSignal.timeout(2000) });
        await r.arrayBuffer();
        return r.ok;
      },
      {
        ms,
        what: url,
        giveUp: () =>
          svc && (svc.child.exitCode !== null || svc.child.signalCode !== null)
            ? `process exited (${String(svc.child.exitCode)})`
            : undefined,
      },
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}${svc ? `:\n${svc.output()}` : ''}`);
  }
}
