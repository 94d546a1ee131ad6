import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { RequestListener } from 'node:http';

/** Timeouts chosen so a slow or stalled client cannot hold a socket for long. */
export const SERVER_LIMITS = {
  /** Whole request, body included: an 8 MB body over a slow mobile link still fits. */
  requestTimeoutMs: 60_000,
  headersTimeoutMs: 15_000,
  keepAliveTimeoutMs: 5_000,
  maxHeaderSize: 16 * 1024,
} as const;

export interface RunningServer {
  server: http.Server;
  port: number;
  url: string;
  /** Stops accepting, lets in-flight requests finish (at most `graceMs`), then drops the rest. Idempotent. */
  close(graceMs?: number): Promise<void>;
}

/** Starts an HTTP server with deliberate limits. */
export async function listen(handler: RequestListener, port: number, host: string): Promise<RunningServer> {
  const server = http.createServer({ maxHeaderSize: SERVER_LIMITS.maxHeaderSize, requestTimeout: SERVER_LIMITS.requestTimeoutMs }, handler);
  server.headersTimeout = SERVER_LIMITS.headersTimeoutMs;
  server.keepAliveTimeout = SERVER_LIMITS.keepAliveTimeoutMs;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const shownHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  let closing: Promise<void> | undefined;
  return {
    server,
    port: addr.port,
    url: `http://${shownHost.includes(':') ? `[${shownHost}]` : shownHost}:${addr.port}`,
    close(graceMs = 10_000) {
      closing ??= new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.closeAllConnections();
        }, graceMs);
        timer.unref();
        server.close(() => {
          clearTimeout(timer);
          resolve();
        });
        server.closeIdleConnections();
      });
      return closing;
    },
  };
}
