/**
 * A small HTTP load balancer on 127.0.0.1 for rollout tests, shaped like a Kubernetes Service
 * behind kube-proxy: it polls each backend's /readyz every `pollMs` (its endpoint list holds the
 * backends whose last answer was 200), routes each request to the next ready backend (round
 * robin) and never retries: a real load balancer does not replay a POST it already sent. A request
 * with no ready backend gets 503 + Retry-After (Envoy's "no healthy upstream"); one whose backend
 * fails (refused, reset, hang up) gets 502 with the error's code. Both are counted, so a test can
 * assert that a rollout never met either.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface BalancerStats {
  /** Requests forwarded to a backend. */
  routed: number;
  /** Requests answered 503 because no backend was ready. */
  noBackend: number;
  /** Backend failures answered 502, by error code (ECONNREFUSED, ECONNRESET, socket hang up …). */
  upstreamErrors: Record<string, number>;
  /** Answers a backend sent with `Connection: close`, by backend URL. */
  closedByBackend: Record<string, number>;
}

interface Backend {
  url: URL;
  ready: boolean;
}

/** Hop-by-hop headers a proxy does not forward (RFC 9110, 7.6.1). */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
]);

function forwardable(headers: http.IncomingHttpHeaders): http.OutgoingHttpHeaders {
  const out: http.OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
  return out;
}

export class LoopbackBalancer {
  readonly stats: BalancerStats = { routed: 0, noBackend: 0, upstreamErrors: {}, closedByBackend: {} };
  private readonly backends: Backend[] = [];
  private next = 0;
  private timer: NodeJS.Timeout | undefined;
  private polling = false;
  // Pooled backend sockets are dropped after 2 s idle, before the API's own 5 s keep-alive
  // timeout (shared/http.ts), as proxies are configured, so an idle socket the backend is closing
  // is never reused in normal operation. The drain is what moves the busy ones.
  private readonly agent = new http.Agent({ keepAlive: true, timeout: 2000, maxSockets: 64 });

  private constructor(
    private readonly server: http.Server,
    readonly url: string,
    private readonly pollMs: number,
  ) {}

  /** Listens on a free loopback port; polls the backends' /readyz every `pollMs` (default 500). */
  static async start(opts: { pollMs?: number } = {}): Promise<LoopbackBalancer> {
    const ref: { lb?: LoopbackBalancer } = {};
    const server = http.createServer((req, res) => ref.lb?.route(req, res));
    // Longer than the clients' idle time: the client side of the balancer is not under test.
    server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const lb = new LoopbackBalancer(
      server,
      `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      opts.pollMs ?? 500,
    );
    ref.lb = lb;
    lb.timer = setInterval(() => void lb.poll(), lb.pollMs);
    return lb;
  }

  /** Adds a backend (not ready until its /readyz answers 200 to a poll). */
  add(url: string): void {
    this.backends.push({ url: new URL(url), ready: false });
  }

  /** Removes a backend from the endpoint list (its pod is gone). */
  remove(url: string): void {
    const i = this.backends.findIndex((b) => b.url.origin === new URL(url).origin);
    if (i >= 0) this.backends.splice(i, 1);
  }

  /** The backends the last poll found ready, by origin. */
  ready(): string[] {
    return this.backends.filter((b) => b.ready).map((b) => b.url.origin);
  }

  /** One poll of every backend, at most one at a time; a backend that does not answer 200 within 1.5 s is not ready. */
  private async poll(): Promise<void> {
    if (this.polling) return;
    this.polling = true;
    try {
      await Promise.all(
        this.backends.map(async (b) => {
          try {
            const r = await fetch(new URL('/readyz', b.url), { signal: AbortSignal.timeout(1500) });
            await r.arrayBuffer();
            b.ready = r.status === 200;
          } catch {
            b.ready = false;
          }
        }),
      );
    } finally {
      this.polling = false;
    }
  }

  private pick(): Backend | undefined {
    const ready = this.backends.filter((b) => b.ready);
    if (ready.length === 0) return undefined;
    this.next = (this.next + 1) % ready.length;
    return ready[this.next];
  }

  private route(req: http.IncomingMessage, res: http.ServerResponse): void {
    const backend = this.pick();
    if (!backend) {
      this.stats.noBackend++;
      res.writeHead(503, { 'Content-Type': 'application/json', 'Retry-After': '1' });
      res.end(JSON.stringify({ error: 'no ready backend', code: 'no_backend' }));
      req.resume();
      return;
    }
    this.stats.routed++;
    const origin = backend.url.origin;
    const upstream = http.request(
      {
        host: backend.url.hostname,
        port: backend.url.port,
        method: req.method,
        path: req.url,
        headers: forwardable(req.headers),
        agent: this.agent,
      },
      (answer) => {
        if (String(answer.headers.connection ?? '').toLowerCase() === 'close')
          this.stats.closedByBackend[origin] = (this.stats.closedByBackend[origin] ?? 0) + 1;
        res.writeHead(answer.statusCode ?? 502, forwardable(answer.headers));
        answer.pipe(res);
      },
    );
    upstream.on('error', (err: NodeJS.ErrnoException) => {
      const code = err.code ?? err.message;
      this.stats.upstreamErrors[code] = (this.stats.upstreamErrors[code] ?? 0) + 1;
      if (!res.headersSent) {
        res.writeHead(502, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ error: 'backend failed', code }));
      } else res.destroy();
    });
    req.pipe(upstream);
  }

  /** Stops polling and listening; drops pooled sockets. Idempotent. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    this.agent.destroy();
    if (!this.server.listening) return;
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
