/**
 * The HTTP contract's schemas, in one place: what the handlers validate parameters, queries,
 * headers and JSON bodies with, and what the OpenAPI document (document.ts) describes them with.
 * A handler never re-states a rule written here; the document is generated from these values.
 */
import { z } from 'zod';
import { BATCH_ID_RE } from '../../../shared/ids.js';
import { PARAM_VALUE_RE } from '../../../shared/paths.js';
import { ERASURE_ID_RE, EraseRequestSchema } from '../../../shared/redis/jobs/erase.js';
import { CURSOR_RE, MAX_REWRITTEN_LIMIT } from '../../../shared/erasure/rewritten.js';

/** Strips the anchors of a RegExp source so it can be embedded in a larger pattern. */
function inner(re: RegExp): string {
  return re.source.replace(/^\^/, '').replace(/\$$/, '');
}

/** A path parameter of a storagePath: 1-128 characters of `[A-Za-z0-9._~-]`, not `.` or `..`. */
export const PathParam = z
  .string()
  .regex(new RegExp(`^(?!\\.{1,2}$)${inner(PARAM_VALUE_RE)}$`))
  .meta({ description: '1-128 characters of [A-Za-z0-9._~-], not "." or ".."' });

/** A batch id (`1782933157690-0000-735223`), with or without `.parquet`. */
export const BatchRef = z
  .string()
  .regex(new RegExp(`^${inner(BATCH_ID_RE)}(\\.parquet)?$`))
  .meta({ description: 'A batch id like 1782933157690-0000-735223, with or without .parquet' });

/** A batch id or a group job id (`g-<batch id>`), as `POST /admin/replay/{batchId}` takes it. */
export const ReplayId = z.string().regex(new RegExp(`^(g-)?${inner(BATCH_ID_RE)}$`));

/** A cursor of the rewritten log. */
export const RewrittenCursor = z.string().regex(CURSOR_RE);

/** An erasure id (`er-1782933157690-0123456789abcdef`). */
export const ErasureId = z.string().regex(ERASURE_ID_RE);

/** `Idempotency-Key`: 1-255 printable ASCII characters. */
export const IdempotencyKey = z.string().regex(/^[\x21-\x7e]{1,255}$/);

/** `Content-Encoding` of a push: one coding at most (gzip, x-gzip, deflate, br), `identity` ignored. Checked by push/admission/content.ts. */
export const ContentEncodingHeader = z
  .string()
  .meta({ description: 'gzip, x-gzip, deflate, br or identity; at most one real coding' });

/** `limit` of the batch listing. */
export const ListLimit = z.int().min(1).max(1000).default(100);
/** `limit` of the rewritten log. */
export const RewrittenLimit = z.int().min(1).max(MAX_REWRITTEN_LIMIT).default(100);
/** `limit` of `GET /admin/failed` (MAX_REPLAY_BATCH). */
export const FailedLimit = z.int().min(1).max(1000).default(100);
/** `reissue` of the replay routes: `1` or `true` reissues under new ids; anything else does not. */
export const Reissue = z.string().meta({ description: '1 or true: replay under new batch ids' });

export { EraseRequestSchema };

/** True when `value` fits `schema` (a string rule of this module). */
export function fits(schema: z.ZodType, value: unknown): boolean {
  return schema.safeParse(value).success;
}

// ---- answers ----

export const PushAnswer = z
  .object({ hash: z.string(), batchId: z.string().nullable() })
  .meta({ description: 'The batch id (null for an empty events array) and the body hash' });
export const ListAnswer = z.object({ items: z.array(z.string()), hasMore: z.boolean() });
export const RewrittenAnswer = z.object({
  items: z.array(z.object({ cursor: z.string(), batchIds: z.array(z.string()) })),
  next: z.string().nullable(),
  hasMore: z.boolean(),
});
/** Pull of a batch that does not exist: the Starfish reference's empty document. */
export const PullMissingAnswer = z.object({ data: z.object({}), hash: z.literal(''), timestamp: z.number() });
export const ConfigAnswer = z.object({
  collections: z.array(
    z.object({
      name: z.string(),
      maxBodyBytes: z.int(),
      encryption: z.string(),
      allowedMimeTypes: z.array(z.string()),
      maxEventsPerBatch: z.int(),
    }),
  ),
});
export const AliveAnswer = z.object({ ok: z.literal(true) });
export const ReadyAnswer = z.object({
  ok: z.boolean(),
  checks: z.record(z.string(), z.string()).meta({
    description:
      '`redis` and `store`: `ok` or what is unreachable; `process`: `draining` once the process is stopping (absent otherwise)',
  }),
  watermarkLagSeconds: z.number().nullable(),
  shedding: z.string().nullable(),
  draining: z.boolean().meta({
    description:
      'True from SIGTERM until the process exits: it still serves for SHUTDOWN_DRAIN_MS, then stops listening; send new requests elsewhere',
  }),
});
const FailedBatch = z.object({
  batchId: z.string(),
  key: z.string().nullable(),
  events: z.number().nullable(),
  attemptsMade: z.number(),
  failedReason: z.string(),
  failedAt: z.number().nullable(),
  members: z.array(z.string()).optional(),
});
export const FailedAnswer = z.object({ total: z.int(), items: z.array(FailedBatch) });
export const ReplayOutcomeAnswer = z.object({
  batchId: z.string(),
  outcome: z.enum(['replayed', 'reissued', 'not-failed', 'bad-job']),
  newBatchId: z.string().optional(),
  detail: z.string().optional(),
});
export const ReplayAllAnswer = z.object({ replayed: z.int(), results: z.array(ReplayOutcomeAnswer) });
export const EraseQueuedAnswer = z.object({ id: z.string(), state: z.literal('queued') });
export const EraseStatusAnswer = z
  .object({
    id: z.string(),
    // Absent for a job whose data cannot be read (state failed, `error` says why).
    collection: z.string().optional(),
    app: z.string().optional(),
    dry_run: z.boolean(),
    state: z.enum(['queued', 'running', 'waiting', 'completed', 'failed']),
    files_scanned: z.int(),
    files_rewritten: z.int(),
    rows_erased: z.int(),
    step: z.string().optional(),
    requested_at: z.string().optional(),
    attempts: z.int(),
    error: z.string().optional(),
  })
  .loose();

/** A header or parameter taken as any string (its rules are in the handler: If-None-Match, Range). */
export const Text = z.string();

/**
 * One Segment call (services/api/segment/translate.ts maps it; docs/segment.md). Permissive: the
 * translator validates the bytes (UTF-8, JSON, depth) and keeps every other member in `extra`.
 */
export const SegmentCall = z
  .object({
    type: z.enum(['track', 'identify', 'page', 'screen', 'group', 'alias']).optional().describe('→ event_type'),
    event: z.string().optional().describe('track: → event'),
    name: z.string().optional().describe('page, screen: → event'),
    userId: z.unknown().optional().describe('→ distinct_id'),
    anonymousId: z.unknown().optional().describe('→ anonymous_id'),
    timestamp: z.unknown().optional().describe('→ ts'),
    messageId: z.unknown().optional().describe('→ message_id; every call with one: the request is idempotent'),
    properties: z.unknown().optional().describe('track, page, screen: → properties'),
    traits: z.unknown().optional().describe('identify, group: → properties'),
    context: z.unknown().optional().describe('→ context'),
    writeKey: z.string().optional().describe('The write key when no Authorization header; never stored'),
  })
  .loose();

/** `POST /v1/batch`: the calls, and members (sentAt, context, …) applied to each call without them. */
export const SegmentBatch = z.object({ batch: z.array(SegmentCall), writeKey: z.string().optional() }).loose();

/** What the Segment door answers once the batch is durable. */
export const SegmentAnswer = z.object({ success: z.literal(true) });
