/**
 * The OpenAPI 3.1 document of the product for one config: the route table (routes.ts), its
 * schemas (schemas.ts, through zod's JSON Schema 2020-12 output), the error codes of the error
 * map (error-map.ts) grouped by status per route, and the security schemes applied from each
 * route's roles. Nothing here is written by hand twice: `GET /openapi.json`, the CLI's
 * `events-ingest openapi` and docs/openapi.json all come from {@link openApiDocument}.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { SyncConfig } from '../../../shared/config.js';
import { ERROR_CODES, ERROR_CODE_LIST, type ErrorCode } from '../error-map.js';
import {
  type Answer,
  type HeaderName,
  type JsonSchema,
  type RouteSpec,
  type RouteTableOptions,
  SEGMENT_WRITE_KEY_ROLE,
  routeTable,
} from './routes.js';

/** Which credential kinds the deployment takes besides bearer tokens. */
export interface DocumentOptions extends RouteTableOptions {
  /** JWT_JWKS_URL or JWT_PUBLIC_KEY set. */
  jwt?: boolean;
  /** CAP_AUTH=on. */
  cap?: boolean;
  /** CORS_ORIGINS set: the sync paths and /config answer CORS preflights (OPTIONS). */
  cors?: boolean;
  /** `info.version`; default the package's. */
  version?: string;
}

export type OpenApiDocument = Record<string, unknown> & { paths: Record<string, Record<string, unknown>> };

const HEADERS: Record<HeaderName, { description: string; schema: JsonSchema }> = {
  ETag: { description: 'Strong entity tag of the representation', schema: { type: 'string' } },
  'Retry-After': { description: 'Seconds to wait before retrying', schema: { type: 'string', pattern: '^\\d+$' } },
  Allow: { description: 'The methods the path serves', schema: { type: 'string' } },
  'Content-Range': {
    description: 'bytes start-end/size, or bytes */size on 416',
    schema: { type: 'string', pattern: '^bytes (\\d+-\\d+|\\*)/\\d+$' },
  },
  'Raw-Deleted-Through': {
    description: 'The newest batch id raw retention deleted for this prefix',
    schema: { type: 'string' },
  },
  'Cache-Control': { description: 'Caching of the answer', schema: { type: 'string' } },
  'WWW-Authenticate': { description: 'The scheme to authenticate with', schema: { type: 'string' } },
  'Accept-Ranges': { description: 'bytes', schema: { type: 'string' } },
};

/** The headers that go with an error status. */
const ERROR_HEADERS: Partial<Record<number, { name: HeaderName; required: boolean }[]>> = {
  401: [{ name: 'WWW-Authenticate', required: false }],
  405: [{ name: 'Allow', required: true }],
  410: [{ name: 'Raw-Deleted-Through', required: true }],
  416: [{ name: 'Content-Range', required: true }],
  429: [{ name: 'Retry-After', required: true }],
  503: [{ name: 'Retry-After', required: true }],
};

/** A zod schema (or a JSON Schema literal) as OpenAPI 3.1's schema object. */
function jsonSchema(s: z.ZodType | JsonSchema, io: 'input' | 'output'): JsonSchema {
  if (!(s instanceof z.ZodType)) return s;
  const { $schema: _drop, ...rest } = z.toJSONSchema(s, {
    target: 'draft-2020-12',
    io,
    unrepresentable: 'any',
  }) as JsonSchema;
  return rest;
}

function headerObjects(
  headers: readonly { name: HeaderName; required?: boolean }[] | undefined,
): Record<string, unknown> | undefined {
  if (!headers?.length) return undefined;
  return Object.fromEntries(headers.map((h) => [h.name, { ...HEADERS[h.name], required: h.required === true }]));
}

function answerObject(a: Answer, head: boolean): Record<string, unknown> {
  const headers = headerObjects(a.headers);
  const content =
    !head && a.content
      ? Object.fromEntries(Object.entries(a.content).map(([type, s]) => [type, { schema: jsonSchema(s, 'output') }]))
      : undefined;
  return { description: a.description, ...(headers ? { headers } : {}), ...(content ? { content } : {}) };
}

/** The error answers of a route: one per status, `code` an enum of the route's codes with that status. */
function errorAnswers(codes: readonly ErrorCode[], head: boolean): Record<string, unknown> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of ERROR_CODE_LIST) {
    if (!codes.includes(code)) continue;
    const status = ERROR_CODES[code].status;
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  const out: Record<string, unknown> = {};
  for (const [status, list] of [...byStatus].sort((a, b) => a[0] - b[0])) {
    const headers = headerObjects(ERROR_HEADERS[status]);
    const schema = {
      type: 'object',
      required: ['error', 'code'],
      additionalProperties: false,
      properties: { error: { type: 'string' }, code: { type: 'string', enum: list } },
    };
    out[String(status)] = {
      description: list.map((c) => `\`${c}\`: ${ERROR_CODES[c].description}`).join(' '),
      ...(headers ? { headers } : {}),
      ...(head ? {} : { content: { 'application/json': { schema } } }),
    };
  }
  return out;
}

function parameters(r: RouteSpec): unknown[] {
  const each = (where: 'path' | 'query' | 'header', params: Record<string, z.ZodType> | undefined): unknown[] =>
    Object.entries(params ?? {}).map(([name, s]) => ({
      name,
      in: where,
      required: where === 'path',
      schema: jsonSchema(s, 'input'),
    }));
  return [...each('path', r.pathParams), ...each('query', r.query), ...each('header', r.headers)];
}

function security(roles: readonly string[], o: DocumentOptions): Record<string, string[]>[] {
  if (roles.includes('public')) return [];
  // The write key is the Basic user name, or the body's `writeKey` (then no header at all).
  if (roles.includes(SEGMENT_WRITE_KEY_ROLE)) return [{ segmentWriteKey: [] }, {}];
  return [{ bearerToken: [] }, ...(o.jwt ? [{ jwt: [] }] : []), ...(o.cap ? [{ starfishCap: [] }] : [])];
}

function operation(r: RouteSpec, o: DocumentOptions, head: boolean): Record<string, unknown> {
  const params = parameters(r);
  const answers = Object.fromEntries(r.answers.map((a) => [String(a.status), answerObject(a, head)]));
  const body = r.body
    ? {
        requestBody: {
          required: r.body.required,
          content: Object.fromEntries(
            Object.entries(r.body.content).map(([t, s]) => [t, { schema: jsonSchema(s, 'input') }]),
          ),
        },
      }
    : {};
  return {
    operationId: head ? `${r.operationId}_head` : r.operationId,
    summary: r.summary,
    tags: [r.tag],
    ...(params.length ? { parameters: params } : {}),
    ...body,
    responses: { ...answers, ...errorAnswers(r.codes, head) },
    security: security(r.roles, o),
    'x-roles': [...r.roles],
  };
}

/** The prefixes (after BASE_PATH) the CORS middleware guards (router.ts: the sync paths and /config). */
const CORS_PREFIXES = ['/push/', '/pull/', '/list/', '/config', '/v1/'];

/**
 * A CORS preflight (`OPTIONS` with `Access-Control-Request-Method`), answered 204 before any route
 * by edge/cors.ts; an allowed origin gets the Access-Control-Allow-* headers, another none.
 */
function preflight(path: string): Record<string, unknown> {
  const header = (description: string) => ({ description, required: false, schema: { type: 'string' } });
  return {
    operationId: `preflight_${path.replace(/[^A-Za-z0-9]+/g, '_').replace(/^_|_$/g, '')}`,
    summary: 'CORS preflight (CORS_ORIGINS set)',
    tags: ['cors'],
    responses: {
      '204': {
        description: 'Preflight answered; the Allow headers only for an allowed origin',
        headers: {
          'Access-Control-Allow-Origin': header('The allowed origin, or *'),
          'Access-Control-Allow-Methods': header('The methods a browser may use'),
          'Access-Control-Allow-Headers': header('The headers a browser may send'),
          'Access-Control-Max-Age': header('Seconds a browser may cache this answer'),
        },
      },
    },
    security: [],
    'x-roles': ['public'],
  };
}

/** The OpenAPI 3.1 document of every route the product serves for `config`. */
export function openApiDocument(config: Pick<SyncConfig, 'collections'>, o: DocumentOptions = {}): OpenApiDocument {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routeTable(config, o)) {
    const item = (paths[r.path] ??= {});
    item[r.method] = operation(r, o, false);
    if (r.head) item.head = operation(r, o, true);
    const bare = r.path.slice((o.basePath ?? '').length);
    if (o.cors && CORS_PREFIXES.some((p) => bare.startsWith(p))) item.options = preflight(r.path);
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'events-ingest',
      version: o.version ?? '0.1.0',
      description:
        'Events ingest over the Starfish sync protocol. Every error answer is {"error": "<sentence>", "code": "<code>"}; a path no route serves answers 404 `not_found`.',
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    servers: [{ url: '/' }],
    tags: [...new Set([...routeTable(config, o).map((r) => r.tag), ...(o.cors ? ['cors'] : [])])].map((name) => ({
      name,
    })),
    paths,
    components: {
      securitySchemes: {
        bearerToken: {
          type: 'http',
          scheme: 'bearer',
          description: 'A token of ADMIN_TOKEN or TOKENS_FILE: Authorization: Bearer <token>',
        },
        jwt: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description: 'A JWT signed by JWT_JWKS_URL or JWT_PUBLIC_KEY (when configured); roles from JWT_ROLES_CLAIM',
        },
        starfishCap: {
          type: 'http',
          scheme: 'Cap',
          description: 'A Starfish v3 capability certificate (CAP_AUTH=on): Authorization: Cap <cert>',
        },
        ...(o.segment
          ? {
              segmentWriteKey: {
                type: 'http',
                scheme: 'basic',
                description:
                  "A Segment write key of SEGMENT_WRITE_KEYS_FILE as the Basic user name (empty password); or the body's writeKey",
              },
            }
          : {}),
      },
      schemas: {
        ErrorCode: { type: 'string', enum: [...ERROR_CODE_LIST] },
        Error: {
          type: 'object',
          required: ['error', 'code'],
          properties: { error: { type: 'string' }, code: { $ref: '#/components/schemas/ErrorCode' } },
        },
      },
    },
  };
}

/** The document as served: its JSON text and strong ETag. */
export function renderDocument(doc: OpenApiDocument): { body: string; etag: string } {
  const body = `${JSON.stringify(doc, null, 2)}\n`;
  return { body, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"` };
}

/** The environment settings the document depends on (BASE_PATH, JWT and cap auth on or off). */
export interface DocumentEnv {
  BASE_PATH?: string | undefined;
  JWT_JWKS_URL?: string | undefined;
  JWT_PUBLIC_KEY?: string | undefined;
  CAP_AUTH?: string | undefined;
  SEGMENT_WRITE_KEYS_FILE?: string | undefined;
  /** As parsed by shared/config.ts (a list), or as the environment gives it (comma-separated). */
  CORS_ORIGINS?: readonly string[] | string | undefined;
}

/** The document options `npm start` serves with, from its environment. */
export function documentOptionsOf(env: DocumentEnv): DocumentOptions {
  return {
    basePath: env.BASE_PATH ?? '',
    jwt: Boolean(env.JWT_JWKS_URL || env.JWT_PUBLIC_KEY),
    cap: env.CAP_AUTH === 'on',
    segment: Boolean(env.SEGMENT_WRITE_KEYS_FILE),
    cors: typeof env.CORS_ORIGINS === 'string' ? env.CORS_ORIGINS.trim() !== '' : Boolean(env.CORS_ORIGINS?.length),
  };
}
