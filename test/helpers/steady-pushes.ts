/**
 * Steady push clients for the tests that disturb a running product (a rollout, a failover): each
 * client pushes one batch after another (1 to 5 sample events, its own `Idempotency-Key`), and
 * retries a batch with the same key as the test's `onFailure` decides, a bounded number of times
 * for a bounded time. Every loop is bounded: pushes per client, an optional deadline, attempts and
 * milliseconds per batch, a timeout per request. Only loopback URLs are meant here.
 */
import { batchBody, sampleEvent } from './events.js';

/** One push request of a batch: what was sent, and the answer (or the error, when there was none). */
export interface PushAttempt {
  client: number;
  key: string;
  app: string;
  events: number;
  /** 0 for the first request of the batch. */
  attempt: number;
  /** The answer's status, headers, body text and JSON `code` (if any); undefined when none came. */
  answer?: { status: number; headers: Headers; text: string; code?: string };
  /** Why no answer came (connection refused or reset, timeout). */
  error?: Error & { cause?: { code?: string; message?: string } };
}

/** What a client does after an attempt that was not a 200: retry the batch after a pause, or give it up. */
export type PushVerdict = { retryInMs: number } | 'give-up';

export interface SteadyPushOptions {
  /** The API's (or a balancer's) base URL. */
  url: string;
  apps: readonly string[];
  clients: number;
  /** Batches per client at most. */
  maxPushesPerClient: number;
  /** No new batch is started after this time (ms since the epoch). */
  until?: number;
  /** Requests per batch at most, and for how long a batch is retried. */
  attemptsPerBatch: number;
  batchMs: number;
  requestTimeoutMs: number;
  /** A pause after each batch (acknowledged or given up). */
  pauseMs?: number;
  /** Called on every attempt that was not a 200 (answered or not). */
  onFailure: (a: PushAttempt) => PushVerdict;
  /** Called on every 200, with the batch id it acknowledged (already in `acked`). */
  onAck?: (a: PushAttempt, batchId: string) => void;
}

export interface SteadyPushes {
  /** Batch id → the push it acknowledged. A test may add its own (direct) pushes. */
  acked: Map<string, { app: string; key: string; events: number }>;
  /** Answers by status; 0 counts the attempts that got no answer. */
  statuses: Map<number, number>;
  /** Requests sent, retries included. */
  requests(): number;
  /** Batches never acknowledged (given up, or out of attempts or time). */
  gaveUp(): number;
  /** Stops starting batches and waits for the clients to finish the ones in flight. */
  stop(): Promise<void>;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Starts `clients` push clients; batch `i` (over all clients) goes to `apps[i % apps.length]`, key `c<client>-b<i>`. */
export function startSteadyPushes(o: SteadyPushOptions): SteadyPushes {
  const acked: SteadyPushes['acked'] = new Map();
  const statuses = new Map<number, number>();
  let requests = 0;
  let gaveUp = 0;
  let seq = 0;
  let stopped = false;
  const count = (status: number): void => void statuses.set(status, (statuses.get(status) ?? 0) + 1);

  const client = async (k: number): Promise<void> => {
    for (let n = 0; n < o.maxPushesPerClient && !stopped && (o.until === undefined || Date.now() < o.until); n++) {
      const i = seq++;
      const app = o.apps[i % o.apps.length] as string;
      const events = 1 + (i % 5);
      const body = batchBody(events, sampleEvent);
      const key = `c${k}-b${i}`;
      const giveUp = Date.now() + o.batchMs;
      let done = false;
      for (let attempt = 0; attempt < o.attemptsPerBatch && Date.now() < giveUp; attempt++) {
        const a: PushAttempt = { client: k, key, app, events, attempt };
        requests++;
        try {
          const r = await fetch(`${o.url}/push/events/${app}/x`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
            body,
            signal: AbortSignal.timeout(o.requestTimeoutMs),
          });
          const text = await r.text();
          let code: string | undefined;
          try {
            code = (JSON.parse(text) as { code?: string }).code;
          } catch {
            code = undefined;
          }
          a.answer = { status: r.status, headers: r.headers, text, code };
        } catch (err) {
          a.error = err as PushAttempt['error'];
        }
        count(a.answer?.status ?? 0);
        if (a.answer?.status === 200) {
          const batchId = (JSON.parse(a.answer.text) as { batchId: string }).batchId;
          acked.set(batchId, { app, key, events });
          o.onAck?.(a, batchId);
          done = true;
          break;
        }
        const verdict = o.onFailure(a);
        if (verdict === 'give-up') break;
        await sleep(verdict.retryInMs);
      }
      if (!done) gaveUp++;
      if (o.pauseMs) await sleep(o.pauseMs);
    }
  };
  const running = Array.from({ length: o.clients }, (_, k) => client(k));
  return {
    acked,
    statuses,
    requests: () => requests,
    gaveUp: () => gaveUp,
    stop: async () => {
      stopped = true;
      await Promise.all(running);
    },
  };
}
