/**
 * The integration tier's OpenAPI hook (test/helpers/openapi-hook.ts) finds an answer its server's
 * document does not describe: a loopback server registered as the product serves a one-route
 * document, then answers a status, a body and a path that the document does not list.
 */
import { type Server, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { takeOpenApiProblems } from '../helpers/openapi-hook.js';
import { registerProductOrigin } from '../helpers/openapi-origins.js';

const DOC = {
  openapi: '3.1.0',
  info: { title: 'hook test', version: '0' },
  paths: {
    '/x': {
      get: {
        responses: {
          '200': {
            description: 'ok',
            content: {
              'application/json': { schema: { type: 'object', required: ['ok'], properties: { ok: { const: true } } } },
            },
          },
        },
      },
    },
  },
};

describe('the OpenAPI hook', () => {
  let server: Server;
  let url = '';
  beforeAll(async () => {
    server = createServer((req, res) => {
      const json = (status: number, body: unknown) => {
        res.writeHead(status, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (req.url === '/openapi.json') json(200, DOC);
      else if (req.url === '/x?good') json(200, { ok: true });
      else if (req.url === '/x?teapot') json(418, { ok: true });
      else if (req.url === '/x?bad-body') json(200, { ok: 'yes' });
      else json(500, { error: 'boom', code: 'internal' });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    registerProductOrigin(url);
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('passes a described answer and names each undescribed one', async () => {
    await (await fetch(`${url}/x?good`)).text();
    expect(await takeOpenApiProblems()).toEqual([]);
    for (const q of ['/x?teapot', '/x?bad-body', '/elsewhere']) await (await fetch(`${url}${q}`)).text();
    const problems = await takeOpenApiProblems();
    expect(problems).toHaveLength(3);
    expect(problems[0]).toMatch(/GET \/x 418: status not listed for get \/x \(200\)/);
    expect(problems[1]).toMatch(/GET \/x 200: body .* does not fit/);
    expect(problems[2]).toMatch(/GET \/elsewhere 500: path not in the document/);
  });
});
