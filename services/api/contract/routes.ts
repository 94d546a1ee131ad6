/**
 * The route table of the product, per configured collection: every path and method `npm start`
 * serves, what each takes (the schemas of schemas.ts) and answers (success bodies and headers,
 * and the error codes of the error map it can refuse with). document.ts turns it into OpenAPI.
 * Paths are built with the router's own helpers (shared/paths.ts, REWRITTEN_ROUTE), so a
 * storagePath gives the same routes here as in router.ts.
 */
import type { z } from 'zod';
import type { CollectionConfig, SyncConfig } from '../../../shared/config.js';
import { parseStoragePath } from '../../../shared/paths.js';
import type { ErrorCode } from '../error-map.js';
import { REWRITTEN_ROUTE, rewrittenRoles } from '../list/rewritten.js';
import { PARQUET_MIME_TYPE } from '../plugin.js';
import { PUSH_ENVELOPE_SCHEMA } from './envelope-schema.js';
import * as S from './schemas.js';
import { SEGMENT_PATHS } from '../segment/translate.js';

/** A JSON Schema literal (the push envelope's, which the byte scanner validates). */
export type JsonSchema = Record<string, unknown>;

/** A response header a route may send. */
export type HeaderName =
  | 'ETag'
  | 'Retry-After'
  | 'Allow'
  | 'Content-Range'
  | 'Raw-Deleted-Through'
  | 'Cache-Control'
  | 'WWW-Authenticate'
  | 'Accept-Ranges';

/** One success (or non-error) answer of a route. */
export interface Answer {
  status: number;
  description: string;
  /** Media type → schema; none: an empty body. */
  content?: Record<string, z.ZodType | JsonSchema>;
  headers?: { name: HeaderName; required?: boolean }[];
}

/** One operation of the table. */
export interface RouteSpec {
  method: 'get' | 'post';
  /** OpenAPI path template, with the base path. */
  path: string;
  operationId: string;
  summary: string;
  tag: string;
  /** Roles that may call it: `public` in it, no credentials needed. */
  roles: readonly string[];
  pathParams?: Record<string, z.ZodType>;
  query?: Record<string, z.ZodType>;
  headers?: Record<string, z.ZodType>;
  body?: { required: boolean; content: Record<string, z.ZodType | JsonSchema> };
  answers: Answer[];
  /** Every error code it can answer with (grouped by status in the document). */
  codes: ErrorCode[];
  /** GET routes also answer HEAD (Express), with the same statuses and headers, no body. */
  head?: boolean;
}

/** What the document depends on besides the collections. */
export interface RouteTableOptions {
  /** BASE_PATH ('' or `/prefix`). */
  basePath?: string;
  /** `GET /config` is public (npm start) or filtered by the caller's roles. */
  configAuth?: 'public' | 'role-filtered';
  /** SEGMENT_WRITE_KEYS_FILE set: the Segment tracking API under /v1. */
  segment?: boolean;
}

/** The role of the Segment routes: a write key (HTTP Basic user name, or the body's `writeKey`). */
export const SEGMENT_WRITE_KEY_ROLE = 'segment-write-key';

const SERVER: ErrorCode[] = ['internal', 'method_not_allowed'];
const SYNC: ErrorCode[] = [...SERVER, 'unavailable', 'request_timeout', 'rate_limited'];
const AUTH: ErrorCode[] = ['unauthorized', 'forbidden'];

const authCodes = (roles: readonly string[]): ErrorCode[] => (roles.includes('public') ? [] : AUTH);

/** The OpenAPI template of storagePath segments (`events/{app}/{batchId}`). */
function template(segments: ReturnType<typeof parseStoragePath>['segments']): string {
  return segments.map((s) => (s.kind === 'param' ? `{${s.name}}` : s.value)).join('/');
}

function paramsOf(segments: ReturnType<typeof parseStoragePath>['segments']): Record<string, z.ZodType> {
  const out: Record<string, z.ZodType> = {};
  for (const s of segments) if (s.kind === 'param') out[s.name] = S.PathParam;
  return out;
}

/** The push, list, rewritten and pull routes of one collection. */
function collectionRoutes(c: CollectionConfig, base: string): RouteSpec[] {
  const t = parseStoragePath(c.storagePath);
  const full = template(t.segments);
  const prefix = template(t.segments.slice(0, -1));
  const id = c.name.replace(/[^A-Za-z0-9]/g, '_');
  const json = Object.fromEntries(c.allowedMimeTypes.map((m) => [m, PUSH_ENVELOPE_SCHEMA]));
  const routes: RouteSpec[] = [
    {
      method: 'post',
      path: `${base}/push/${full}`,
      operationId: `push_${id}`,
      summary: `Push a batch of events to ${c.name}`,
      tag: c.name,
      roles: c.writeRoles,
      pathParams: paramsOf(t.segments),
      headers: { 'Idempotency-Key': S.IdempotencyKey, 'Content-Encoding': S.ContentEncodingHeader },
      body: { required: true, content: json },
      answers: [
        {
          status: 200,
          description: 'Accepted (or a duplicate of an accepted batch)',
          content: { 'application/json': S.PushAnswer },
        },
      ],
      codes: [
        ...SYNC,
        ...authCodes(c.writeRoles),
        'bad_param',
        'bad_header',
        'bad_json',
        'bad_envelope',
        'bad_encoding',
        'bad_request',
        'too_large',
        'content_type',
        'content_encoding',
        'idempotency_conflict',
        'overloaded',
      ],
    },
    {
      method: 'get',
      path: `${base}/pull/${full}`,
      operationId: `pull_${id}`,
      summary: `Read one batch file of ${c.name} (ETag, 304, ranges)`,
      tag: c.name,
      roles: c.readRoles,
      head: true,
      // Any valid parameter: a name that is no batch id answers the empty document, as a missing batch does.
      pathParams: paramsOf(t.segments),
      headers: { 'If-None-Match': S.Text, Range: S.Text, 'If-Range': S.Text },
      answers: [
        {
          status: 200,
          description: 'The batch file; for a batch that does not exist, the empty Starfish document (JSON)',
          content: {
            [PARQUET_MIME_TYPE]: { type: 'string', contentMediaType: PARQUET_MIME_TYPE },
            'application/json': S.PullMissingAnswer,
          },
          headers: [{ name: 'ETag' }, { name: 'Cache-Control' }, { name: 'Accept-Ranges' }],
        },
        {
          status: 206,
          description: 'A byte range of the batch file',
          content: { [PARQUET_MIME_TYPE]: { type: 'string', contentMediaType: PARQUET_MIME_TYPE } },
          headers: [
            { name: 'Content-Range', required: true },
            { name: 'ETag', required: true },
          ],
        },
        { status: 304, description: 'Not modified (If-None-Match)', headers: [{ name: 'ETag', required: true }] },
      ],
      codes: [...SYNC, ...authCodes(c.readRoles), 'bad_param', 'range_not_satisfiable'],
    },
  ];
  if (!c.listable) return routes;
  routes.push({
    method: 'get',
    path: `${base}/list/${prefix}`,
    operationId: `list_${id}`,
    summary: `List batch ids of ${c.name} after a cursor`,
    tag: c.name,
    roles: c.readRoles,
    head: true,
    pathParams: paramsOf(t.segments.slice(0, -1)),
    query: { limit: S.ListLimit, after: S.BatchRef },
    answers: [
      {
        status: 200,
        description: 'A page of batch ids, oldest first',
        content: { 'application/json': S.ListAnswer },
        headers: [{ name: 'Raw-Deleted-Through' }, { name: 'Cache-Control' }],
      },
    ],
    codes: [...SYNC, ...authCodes(c.readRoles), 'bad_param', 'cursor_expired'],
  });
  if (t.prefixParams.length === 1) {
    const roles = rewrittenRoles(c.readRoles);
    routes.push({
      method: 'get',
      path: `${base}/list/${prefix}/${REWRITTEN_ROUTE}`,
      operationId: `rewritten_${id}`,
      summary: `Batch ids of ${c.name} an erasure rewrote, after a cursor`,
      tag: c.name,
      roles,
      head: true,
      pathParams: paramsOf(t.segments.slice(0, -1)),
      query: { limit: S.RewrittenLimit, after: S.RewrittenCursor },
      answers: [
        {
          status: 200,
          description: 'A page of the rewritten log',
          content: { 'application/json': S.RewrittenAnswer },
          headers: [{ name: 'Cache-Control' }],
        },
      ],
      codes: [...SYNC, ...authCodes(roles), 'bad_param'],
    });
  }
  return routes;
}

/** `/healthz`, `/health`, `/readyz`, `/metrics` (never under BASE_PATH, `/health` also under it). */
function healthRoutes(base: string): RouteSpec[] {
  const alive = (path: string, operationId: string): RouteSpec => ({
    method: 'get',
    path,
    operationId,
    summary: 'Liveness',
    tag: 'health',
    roles: ['public'],
    head: true,
    answers: [{ status: 200, description: 'The process is up', content: { 'application/json': S.AliveAnswer } }],
    codes: SERVER,
  });
  return [
    alive('/healthz', 'healthz'),
    alive('/health', 'health'),
    ...(base ? [alive(`${base}/health`, 'health_base')] : []),
    {
      method: 'get',
      path: '/readyz',
      operationId: 'readyz',
      summary: 'Readiness: Redis and the store reachable, the process not draining',
      tag: 'health',
      roles: ['public'],
      head: true,
      answers: [
        { status: 200, description: 'Ready', content: { 'application/json': S.ReadyAnswer } },
        {
          status: 503,
          description: 'Not ready: what is down, or the process is draining (SIGTERM)',
          content: { 'application/json': S.ReadyAnswer },
          headers: [{ name: 'Retry-After', required: true }],
        },
      ],
      codes: SERVER,
    },
    {
      method: 'get',
      path: '/metrics',
      operationId: 'metrics',
      summary: 'Prometheus metrics',
      tag: 'health',
      roles: ['public'],
      head: true,
      answers: [{ status: 200, description: 'Prometheus text format', content: { 'text/plain': { type: 'string' } } }],
      codes: SERVER,
    },
  ];
}

/** `GET /config` and `GET /openapi.json`. */
function manifestRoutes(base: string, configAuth: 'public' | 'role-filtered'): RouteSpec[] {
  const cached = (status: number, description: string, content?: Answer['content']): Answer => ({
    status,
    description,
    ...(content ? { content } : {}),
    headers: [{ name: 'ETag', required: true }, { name: 'Cache-Control' }],
  });
  return [
    {
      method: 'get',
      path: `${base}/config`,
      operationId: 'config',
      summary: 'The collection manifest (Starfish fetchServerConfig)',
      tag: 'config',
      roles: ['public'],
      head: true,
      headers: { 'If-None-Match': S.Text },
      answers: [cached(200, 'The collections', { 'application/json': S.ConfigAnswer }), cached(304, 'Not modified')],
      codes: configAuth === 'public' ? [...SERVER] : [...SERVER, 'unauthorized', 'unavailable'],
    },
    {
      method: 'get',
      path: `${base}/openapi.json`,
      operationId: 'openapi',
      summary: 'This document',
      tag: 'config',
      roles: ['public'],
      head: true,
      headers: { 'If-None-Match': S.Text },
      answers: [
        cached(200, 'The OpenAPI 3.1 document', { 'application/json': { type: 'object' } }),
        cached(304, 'Not modified'),
      ],
      codes: SERVER,
    },
  ];
}

/** The admin and erasure routes (role `admin`). */
function adminRoutes(base: string): RouteSpec[] {
  const admin = ['admin'];
  const codes: ErrorCode[] = [...SERVER, ...AUTH, 'unavailable'];
  return [
    {
      method: 'get',
      path: `${base}/admin/failed`,
      operationId: 'adminFailed',
      summary: 'Dead-lettered batches, oldest first',
      tag: 'admin',
      roles: admin,
      head: true,
      query: { limit: S.FailedLimit },
      answers: [{ status: 200, description: 'Dead letters', content: { 'application/json': S.FailedAnswer } }],
      codes: [...codes, 'bad_param'],
    },
    {
      method: 'post',
      path: `${base}/admin/replay`,
      operationId: 'adminReplayAll',
      summary: 'Replay every dead letter (up to 1000)',
      tag: 'admin',
      roles: admin,
      query: { reissue: S.Reissue },
      answers: [{ status: 200, description: 'What was replayed', content: { 'application/json': S.ReplayAllAnswer } }],
      codes,
    },
    {
      method: 'post',
      path: `${base}/admin/replay/{batchId}`,
      operationId: 'adminReplay',
      summary: 'Replay one dead letter',
      tag: 'admin',
      roles: admin,
      pathParams: { batchId: S.ReplayId },
      query: { reissue: S.Reissue },
      answers: [
        { status: 200, description: 'What happened to it', content: { 'application/json': S.ReplayOutcomeAnswer } },
      ],
      codes: [...codes, 'bad_param', 'not_found'],
    },
    {
      method: 'post',
      path: `${base}/admin/erase/{collection}/{app}`,
      operationId: 'erase',
      summary: "Erase a person's events from an app",
      tag: 'erasure',
      roles: admin,
      pathParams: { collection: S.Text, app: S.PathParam },
      body: { required: true, content: { 'application/json': S.EraseRequestSchema } },
      answers: [{ status: 202, description: 'Queued', content: { 'application/json': S.EraseQueuedAnswer } }],
      codes: [...codes, 'bad_param', 'bad_json', 'bad_request', 'not_found', 'too_large', 'content_encoding'],
    },
    {
      method: 'get',
      path: `${base}/admin/erase/{id}`,
      operationId: 'eraseStatus',
      summary: 'The state of an erasure',
      tag: 'erasure',
      roles: admin,
      head: true,
      pathParams: { id: S.ErasureId },
      answers: [
        { status: 200, description: 'Its state and counts', content: { 'application/json': S.EraseStatusAnswer } },
      ],
      codes: [...codes, 'bad_param', 'not_found'],
    },
  ];
}

function segmentRoutes(base: string): RouteSpec[] {
  return SEGMENT_PATHS.map(([path, call]) => ({
    method: 'post' as const,
    path: `${base}/v1/${path}`,
    operationId: `segment_${path}`,
    summary: path === call ? `Segment ${call} (one request is one batch)` : `Segment ${call} (short form)`,
    tag: 'segment',
    roles: [SEGMENT_WRITE_KEY_ROLE],
    headers: { 'Content-Encoding': S.ContentEncodingHeader },
    // Read as JSON whatever Content-Type says (analytics.js sends text/plain).
    body: { required: true, content: { 'application/json': call === 'batch' ? S.SegmentBatch : S.SegmentCall } },
    answers: [{ status: 200, description: 'Durable', content: { 'application/json': S.SegmentAnswer } }],
    codes: [
      ...SYNC,
      'unauthorized',
      'bad_json',
      'bad_envelope',
      'bad_encoding',
      'bad_request',
      'too_large',
      'content_encoding',
      'idempotency_conflict',
      'overloaded',
    ],
  }));
}

/** Every route the product serves for `config`, in a stable order. */
export function routeTable(config: Pick<SyncConfig, 'collections'>, o: RouteTableOptions = {}): RouteSpec[] {
  const base = o.basePath ?? '';
  return [
    ...healthRoutes(base),
    ...manifestRoutes(base, o.configAuth ?? 'public'),
    ...config.collections.flatMap((c) => collectionRoutes(c, base)),
    ...adminRoutes(base),
    ...(o.segment ? segmentRoutes(base) : []),
  ];
}
