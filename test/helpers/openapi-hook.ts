/**
 * Integration tier setup file (vitest.config.ts): every HTTP answer a test receives from the
 * product's API is checked against the OpenAPI document of that very server (issue 44, "the server
 * is tested against its own document").
 *
 * - fetch: globalThis.fetch is wrapped; answers of the origins test/helpers/stack.ts and
 *   test/helpers/proc.ts registered (test/helpers/openapi-origins.ts) are checked. Other origins
 *   (s3rver, fake JWKS or sync servers, an app a test listens on by itself) are never probed.
 * - supertest: Test#end is wrapped; the app is asked for its own /openapi.json once; an app
 *   without it (a library router, a test's own express app) is skipped.
 *
 * The document of each server is fetched once (per origin, per app) and cached. A mismatch fails
 * the test that received the answer (in afterEach; answers of beforeAll hooks fail the file in
 * afterAll). OPENAPI_HOOK_REPORT=<file> appends one JSON line per test file with its counts.
 */
import { appendFileSync } from 'node:fs';
import type { IncomingMessage, Server } from 'node:http';
import { afterAll, afterEach, expect } from 'vitest';
import request from 'supertest';
import type { OpenApiDocument } from '../../services/api/contract/document.js';
import { answerChecker, type SeenAnswer } from './openapi-check.js';
import { productBasePath } from './openapi-origins.js';

type Checker = ReturnType<typeof answerChecker>;

/** A body larger than this (or not JSON) is not read: only its status, headers and type are checked. */
const MAX_BODY_READ = 1 << 20;
/** How long afterEach waits for the bodies of the test's answers. */
const SETTLE_MS = 5_000;

const counts = { checked: 0, skippedOrigin: 0, skippedNoDocument: 0, unreadBody: 0 };
const problems: { test: string; text: string }[] = [];
const pending = new Set<Promise<void>>();
const byOrigin = new Map<string, Promise<Checker | undefined>>();
const byApp = new WeakMap<object, Promise<Checker | undefined>>();
/** The fetch and supertest end as they were before any file's setup (a reused worker runs this file again). */
const ORIGINALS = Symbol.for('events-ingest.test.openapiHookOriginals');
const saved = ((globalThis as { [ORIGINALS]?: { fetch: typeof fetch; end?: unknown } })[ORIGINALS] ??= {
  fetch: globalThis.fetch.bind(globalThis),
});
const originalFetch = saved.fetch;
const PROBE = Symbol('openapi-hook probe');

function currentTest(): string {
  return expect.getState().currentTestName ?? '(a hook outside any test)';
}

function track(work: Promise<void>): void {
  const p = work.catch((e: unknown) => {
    problems.push({ test: currentTest(), text: `the OpenAPI hook failed: ${String(e)}` });
  });
  pending.add(p);
  void p.finally(() => pending.delete(p));
}

function record(test: string, checker: Checker | undefined, a: SeenAnswer): void {
  if (!checker) {
    counts.skippedNoDocument++;
    return;
  }
  counts.checked++;
  for (const text of checker.check(a)) problems.push({ test, text });
}

/** The checker of a registered origin, from its own GET <base>/openapi.json (undefined: none served). */
function originChecker(origin: string, base: string): Promise<Checker | undefined> {
  let c = byOrigin.get(origin);
  if (!c) {
    c = originalFetch(`${origin}${base}/openapi.json`, { signal: AbortSignal.timeout(10_000) }).then(async (r) =>
      r.status === 200 ? answerChecker((await r.json()) as OpenApiDocument) : undefined,
    );
    byOrigin.set(origin, c);
  }
  return c;
}

async function bodyOf(res: Response): Promise<string> {
  const type = res.headers.get('content-type') ?? '';
  const length = Number(res.headers.get('content-length') ?? Number.NaN);
  const json = /^application\/(problem\+)?json/.test(type);
  if (!json && !(length <= MAX_BODY_READ)) {
    counts.unreadBody++;
    return res.body ? '(unread)' : '';
  }
  const copy = res.clone();
  return await Promise.race([
    copy.text(),
    new Promise<string>((_, reject) => setTimeout(() => reject(new Error('body not finished')), SETTLE_MS).unref()),
  ]);
}

function requestOf(input: Parameters<typeof fetch>[0], init?: RequestInit): { url: URL; method: string } {
  if (input instanceof Request) return { url: new URL(input.url), method: init?.method ?? input.method };
  return { url: new URL(String(input)), method: init?.method ?? 'GET' };
}

globalThis.fetch = async (input: Parameters<typeof fetch>[0], init?: RequestInit): Promise<Response> => {
  const res = await originalFetch(input, init);
  const { url, method } = requestOf(input, init);
  const base = productBasePath(url.origin);
  if (base === undefined) {
    counts.skippedOrigin++;
    return res;
  }
  const test = currentTest();
  track(
    (async () => {
      const body = method.toUpperCase() === 'HEAD' ? '' : await bodyOf(res).catch(() => undefined);
      if (body === undefined) return void counts.unreadBody++;
      const checker = await originChecker(url.origin, base);
      record(test, checker, {
        method,
        path: url.pathname + url.search,
        status: res.status,
        headers: res.headers,
        body,
      });
    })(),
  );
  return res;
};

interface SupertestTest {
  app: Server | string;
  url: string;
  method: string;
  [PROBE]?: boolean;
}
interface SupertestResponse {
  status: number;
  headers: IncomingMessage['headers'];
  text?: string;
  body?: unknown;
}
type EndCallback = (err: unknown, res?: SupertestResponse) => void;
const Test = (request as unknown as { Test: { prototype: { end(this: SupertestTest, fn?: EndCallback): unknown } } })
  .Test;
saved.end ??= Test.prototype.end;
const originalEnd = saved.end as typeof Test.prototype.end;

/** The express app behind a supertest server (supertest wraps a function app in a server per request). */
function appOf(t: SupertestTest): ((...a: never[]) => void) | undefined {
  if (typeof t.app === 'string') return undefined;
  return t.app.listeners('request')[0] as ((...a: never[]) => void) | undefined;
}

function appChecker(app: (...a: never[]) => void): Promise<Checker | undefined> {
  let c = byApp.get(app);
  if (!c) {
    const probe = request(app as Parameters<typeof request>[0]).get('/openapi.json');
    (probe as unknown as SupertestTest)[PROBE] = true;
    c = Promise.resolve(probe).then((r) =>
      r.status === 200 && typeof r.body === 'object' ? answerChecker(r.body as OpenApiDocument) : undefined,
    );
    byApp.set(app, c);
  }
  return c;
}

Test.prototype.end = function end(this: SupertestTest, fn?: EndCallback) {
  if (this[PROBE]) return originalEnd.call(this, fn);
  const app = appOf(this);
  const test = currentTest();
  return originalEnd.call(this, (err, res) => {
    if (res && app) {
      // The path as sent: superagent does not normalise `..` or `%2E%2E` away, as URL would.
      const path = this.url.replace(/^[a-z]+:\/\/[^/]+/i, '');
      const body = res.text ?? (Buffer.isBuffer(res.body) && res.body.length ? '(binary)' : '');
      const answer = { method: this.method, path, status: res.status, headers: res.headers };
      track(appChecker(app).then((checker) => record(test, checker, { ...answer, body })));
    } else if (res) counts.skippedOrigin++;
    fn?.(err, res);
  });
};

/**
 * For the hook's own test: waits for the pending checks, then takes (and so clears) the problems
 * found so far, which would otherwise fail the running test.
 */
export async function takeOpenApiProblems(): Promise<string[]> {
  await settle();
  return problems.splice(0).map((p) => p.text);
}

async function settle(): Promise<void> {
  const deadline = Date.now() + SETTLE_MS * 2;
  for (let i = 0; i < 100 && pending.size && Date.now() < deadline; i++) {
    await Promise.race([Promise.allSettled([...pending]), new Promise((r) => setTimeout(r, 200))]);
  }
}

function failWith(list: { test: string; text: string }[]): void {
  if (!list.length) return;
  const lines = list.slice(0, 20).map((p) => `  - ${p.text}`);
  throw new Error(
    `${list.length} answer(s) not described by the server's OpenAPI document (test/helpers/openapi-hook.ts):\n${lines.join('\n')}`,
  );
}

afterEach(async () => {
  await settle();
  const test = currentTest();
  const mine = problems.filter((p) => p.test === test);
  problems.splice(0, problems.length, ...problems.filter((p) => p.test !== test));
  failWith(mine);
});

afterAll(async () => {
  await settle();
  const report = process.env.OPENAPI_HOOK_REPORT;
  if (report) {
    const file = expect.getState().testPath ?? '(unknown)';
    appendFileSync(report, `${JSON.stringify({ file, ...counts, problems: problems.length })}\n`);
  }
  failWith(problems.splice(0));
});
