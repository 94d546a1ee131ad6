import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { RequestListener } from 'node:http';

/** Timeouts chosen so a slow or stalled client cannot hold a socket for long. */
export const SERVER_LIMITS = {
  /** Whole request, body included: an 8 MB body over a slow mobile link still fits. */
  requestTimeoutMs: 60_000,
  headersTimeoutMs: 15_000,
  /**
   * How often Node looks for connections past `headersTimeoutMs`/`requestTimeoutMs`. Its default
   * (30 s) let a slow header block live 32-39 s instead of 15; with 1 s it is closed (408) within
   * about 16 s. The check is a walk over open connections: cheap at 1 s.
   */
  connectionsCheckingIntervalMs: 1_000,
  keepAliveTimeoutMs: 5_000,
  maxHeaderSize: 16 * 1024,
} as const;

/** A request refused before `100 Continue` (Node's `checkContinue`): its status and JSON error body, as the HTTP layer's error map made them. */
export interface ContinueRefusal {
  status: number;
  body: { error: string; code: string };
}

export interface ListenOptions {
  /**
   * Asked for each request with `Expect: 100-continue` before Node answers `100 Continue`: a
   * refusal is answered at once (the body is never asked for, the connection is closed);
   * null sends `100 Continue` and hands the request to the handler as usual.
   */
  checkContinue?: (req: http.IncomingMessage) => ContinueRefusal | null;
}

export interface RunningServer {
  server: http.Server;
  port: number;
  url: string;
  /** Stops accepting, lets in-flight requests finish (at most `graceMs`), then drops the rest. Idempotent. */
  close(graceMs?: number): Promise<void>;
}

/** Starts an HTTP server with deliberate limits. */
export async function listen(
  handler: RequestListener,
  port: number,
  host: string,
  opts: ListenOptions = {},
): Promise<RunningServer> {
  const server = http.createServer(
    {
      maxHeaderSize: SERVER_LIMITS.maxHeaderSize,
      requestTimeout: SERVER_LIMITS.requestTimeoutMs,
      headersTimeout: SERVER_LIMITS.headersTimeoutMs,
      connectionsCheckingInterval: SERVER_LIMITS.connectionsCheckingIntervalMs,
    },
    handler,
  );
  server.keepAliveTimeout = SERVER_LIMITS.keepAliveTimeoutMs;
  const { checkContinue } = opts;
  if (checkContinue) {
    server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => {
      const refusal = checkContinue(req);
      if (!refusal) {
        res.writeContinue();
        handler(req, res);
        return;
      }
      const body = JSON.stringify(refusal.body);
      res.writeHead(refusal.status, {
        'Content-Type': 'application/json; charset=utf-8',
        'Content-Length': Buffer.byteLength(body),
        'Cache-Control': 'no-store',
        'X-Content-Type-Options': 'nosniff',
        Connection: 'close',
      });
      res.end(body);
    });
  }
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
