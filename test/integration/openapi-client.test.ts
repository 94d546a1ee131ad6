/**
 * A client generated from the document (openapi-typescript types in test/helpers/openapi-types.ts,
 * regenerated with `npx openapi-typescript docs/openapi.json -o test/helpers/openapi-types.ts`,
 * and openapi-fetch) pushes, lists, pulls and reads /config against the running product.
 */
import createClient from 'openapi-fetch';
import { describe, expect, it } from 'vitest';
import type { paths } from '../helpers/openapi-types.js';
import { ADMIN_TOKEN, useApiOnlyStack } from '../helpers/stack.js';

describe('a client generated from the OpenAPI document', () => {
  const { stack } = useApiOnlyStack({ ROLLUP: 'off' });

  it('pushes, lists, pulls and reads /config', async () => {
    const client = createClient<paths>({ baseUrl: stack().url });
    const config = await client.GET('/config');
    expect(config.data?.collections.map((c) => c.name)).toEqual(['events']);

    const pushed = await client.POST('/push/events/{app}/{batchId}', {
      params: { path: { app: 'client-app', batchId: 'b' }, header: { 'Idempotency-Key': 'client-1' } },
      body: { data: { events: [{ event: 'generated', message_id: 'g1' }] }, baseHash: null },
    });
    expect(pushed.response.status).toBe(200);
    const batchId = pushed.data?.batchId;
    expect(batchId).toMatch(/^\d{13}-\d{4}-[0-9a-f]{6}$/);

    const auth = { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } };
    const refused = await client.GET('/list/events/{app}', { params: { path: { app: 'client-app' } } });
    expect(refused.error?.code).toBe('unauthorized');
    // No encoder in this stack: the batch is queued, so the list shows it once an encoder wrote it;
    // the listing and its typed answer are what is checked here.
    const list = await client.GET('/list/events/{app}', {
      params: { path: { app: 'client-app' }, query: { limit: 10 } },
      ...auth,
    });
    expect(list.response.status).toBe(200);
    expect(list.data?.hasMore).toBe(false);

    const pull = await client.GET('/pull/events/{app}/{batchId}', {
      params: { path: { app: 'client-app', batchId: String(batchId) } },
      parseAs: 'arrayBuffer',
      ...auth,
    });
    expect(pull.response.status).toBe(200);
    // Not encoded yet (no encoder): the Starfish empty document; encoded: the Parquet file.
    expect(pull.response.headers.get('content-type')).toMatch(/^application\/(json|vnd\.apache\.parquet)/);
  });
});
