import type { Registry } from 'prom-client';
import { type RunningServer, listen } from './http.js';
import { type Component, settled } from './lifecycle.js';

/** How long a health server's stop waits for requests in flight (a scrape) before dropping them. */
const CLOSE_MS = 1000;

export interface HealthServerOptions {
  registry: Registry;
  port: number;
  host: string;
  /** `/healthz` answers `{ ok }` with this (a worker taking jobs). */
  healthy(): boolean;
}

/** A process's own small HTTP server, as a lifecycle component. */
export interface HealthServer extends Component {
  /** Set once started. */
  readonly server: RunningServer | undefined;
}

/**
 * The metrics and health server of a process without the API (`start:encoder`, `start:rollup`):
 * `GET /metrics` (the registry's Prometheus text), `GET /healthz` (200 `{ ok }`), 404 otherwise.
 */
export function healthServer(o: HealthServerOptions): HealthServer {
  let server: RunningServer | undefined;
  let starting: Promise<void> | undefined;
  const json = { 'Content-Type': 'application/json' };
  const start = async (): Promise<void> => {
    server = await listen(
      (req, res) => {
        if (req.url === '/metrics') {
          o.registry.metrics().then(
            (text) => res.writeHead(200, { 'Content-Type': o.registry.contentType }).end(text),
            () => res.writeHead(500, json).end('{"error":"metrics unavailable"}'),
          );
        } else if (req.url === '/healthz') res.writeHead(200, json).end(JSON.stringify({ ok: o.healthy() }));
        else res.writeHead(404, json).end('{"error":"not found"}');
      },
      o.port,
      o.host,
    );
  };
  return {
    name: 'health server',
    get server() {
      return server;
    },
    start: () => (starting ??= start()),
    async stop(graceMs) {
      await settled(starting);
      await server?.close(Math.min(CLOSE_MS, graceMs));
    },
  };
}
