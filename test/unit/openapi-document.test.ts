import { readFileSync } from 'node:fs';
import { Validator } from '@seriousme/openapi-schema-validator';
import { describe, expect, it } from 'vitest';
import { DEFAULT_SYNC_CONFIG, parseSyncConfig } from '../../shared/config.js';
import { openApiDocument, renderDocument } from '../../services/api/contract/document.js';
import { ERROR_CODE_LIST } from '../../services/api/error-map.js';

const defaults = parseSyncConfig(DEFAULT_SYNC_CONFIG);

describe('the OpenAPI document', () => {
  it('validates as OpenAPI 3.1 with an independent validator (default config, and with a base path, JWT, cap auth, CORS and the Segment door)', async () => {
    for (const o of [
      {},
      { basePath: '/ingest', jwt: true, cap: true, configAuth: 'role-filtered' as const, cors: true, segment: true },
    ]) {
      const res = await new Validator().validate(openApiDocument(defaults, o));
      expect(res.errors ?? []).toEqual([]);
      expect(res.valid).toBe(true);
    }
  });

  it('docs/openapi.json is what the code generates for the default config (regenerate: npm run cli -- openapi > docs/openapi.json)', () => {
    expect(readFileSync('docs/openapi.json', 'utf8')).toBe(renderDocument(openApiDocument(defaults)).body);
  });

  it('lists every error code of the error map, and only those', () => {
    const text = JSON.stringify(openApiDocument(defaults));
    const used = new Set(
      [...text.matchAll(/"enum":\[([^\]]*)\]/g)].flatMap((m) => JSON.parse(`[${m[1]}]`) as string[]),
    );
    for (const code of ERROR_CODE_LIST) expect(used, code).toContain(code);
    const doc = openApiDocument(defaults) as unknown as { components: { schemas: { ErrorCode: { enum: string[] } } } };
    expect(doc.components.schemas.ErrorCode.enum).toEqual(ERROR_CODE_LIST);
  });

  it('applies security from the roles: public push has none, read and admin routes need a credential', () => {
    const doc = openApiDocument(defaults, { jwt: true });
    const sec = (path: string, method: string) => (doc.paths[path]?.[method] as { security: unknown[] }).security;
    expect(sec('/push/events/{app}/{batchId}', 'post')).toEqual([]);
    expect(sec('/list/events/{app}', 'get')).toEqual([{ bearerToken: [] }, { jwt: [] }]);
    expect(sec('/admin/failed', 'get')).toEqual([{ bearerToken: [] }, { jwt: [] }]);
    expect(sec('/healthz', 'get')).toEqual([]);
    expect(Object.keys(openApiDocument(defaults, { basePath: '/x' }).paths)).toContain('/x/openapi.json');
    expect(Object.keys(openApiDocument(defaults).paths).filter((p) => p.startsWith('/v1/'))).toEqual([]);
    expect(openApiDocument(defaults, { basePath: '/x', segment: true }).paths['/x/v1/batch']?.post).toMatchObject({
      security: [{ segmentWriteKey: [] }, {}],
    });
  });
});
