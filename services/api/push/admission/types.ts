import type { EnvelopeScanThread } from '../../../../shared/envelope-scan-thread.js';
import type { ByteBudget } from '../../../../shared/byte-budget.js';
import type { CollectionConfig } from '../../../../shared/config.js';
import type { PreparedBatch } from '../../../../shared/parquet/encode.js';
import type { StoragePathTemplate } from '../../../../shared/paths.js';
import type { RejectReason, ShedReason } from '../../metrics.js';
import type { Unavailable } from '../outcome.js';
import type { ContentCoding } from './content.js';

/** The codes an admission step refuses with; the HTTP layer's error map gives each its status. */
export type AdmissionCode =
  | 'overloaded'
  | 'bad_param'
  | 'content_type'
  | 'content_encoding'
  | 'bad_header'
  | 'too_large'
  | 'bad_encoding'
  | 'bad_request'
  | 'bad_json'
  | 'bad_envelope'
  | 'rate_limited'
  | 'unavailable';

/** A push refused before `PushService.accept`: why (`code`), in today's words (`detail`). */
export interface Refused {
  readonly kind: 'refused';
  readonly code: AdmissionCode;
  readonly detail: string;
  /** Seconds the client should wait before retrying (sent as Retry-After). */
  readonly retryAfter?: number;
  /** What the transport must send with the answer (e.g. that it closes the connection under an undrained body). */
  readonly headers?: Readonly<Record<string, string>>;
}

export const refused = (
  code: AdmissionCode,
  detail: string,
  hints: { retryAfter?: number; headers?: Record<string, string> } = {},
): Refused => ({ kind: 'refused', code, detail, ...hints });

/** The body as read: decoded bytes, the hashes idempotency and the answer use, the size as sent. */
export interface ReadBody {
  bytes: Buffer;
  hash: string;
  decodedHash: string;
  sentBytes: number;
  /** An idempotency key the body itself gives (a second door's, derived from its messageIds), used when the request has none. */
  idempotencyKey?: string;
}

/** Why a body could not be read (the transport's reader says; the step counts and refuses). */
export interface BodyRefusal {
  reason: 'too_large' | 'over_budget' | 'bad_encoding' | 'unreadable';
  detail: string;
  /** The refusal's code when it is not the reason's usual one (a second door's translation refusing a malformed body: `bad_json`). */
  code?: AdmissionCode;
  retryAfter?: number;
  headers?: Record<string, string>;
}

/** Where the request's body comes from; the router's adapter over the HTTP request. */
export interface BodySource {
  /** Reads within `maxBytes` (as sent and decoded) and the budget, adding what it takes to `held.bytes`. */
  read(o: {
    maxBytes: number;
    coding: ContentCoding;
    budget?: ByteBudget;
    held: { bytes: number };
  }): Promise<ReadBody | BodyRefusal>;
  /** Drops the rest of a refused body; resolves with what the answer must carry. */
  discard(): Promise<Record<string, string>>;
}

/** One push request as the transport parsed it, before any check. */
export interface AdmissionInput {
  /** The route's parameters by name (the batch id's included), unchecked. */
  readonly params: Readonly<Record<string, string | undefined>>;
  readonly contentType: string | undefined;
  readonly contentEncoding: string | undefined;
  readonly idempotencyKey: string | string[] | undefined;
  readonly body: BodySource;
  /** The per-app events budget of this request: null when admitted (absent: no budget). */
  readonly appEvents?: (prefix: string, events: number) => Promise<Refused | null>;
}

/** The metric hooks of admission (the router's observer). */
export interface AdmissionObserver {
  rejected?(reason: RejectReason): void;
  shed?(reason: ShedReason): void;
  /** Each admission step's time (./1-shed.ts … ./6-app-budget.ts, by the step's name). */
  stepSeconds?(step: string, seconds: number): void;
}

/** What admission checks against: the collection, the process' limits, the push path's read-only lookups. */
export interface AdmissionDeps {
  readonly collection: Pick<CollectionConfig, 'name' | 'allowedMimeTypes' | 'maxBodyBytes' | 'maxEventsPerBatch'>;
  readonly template: StoragePathTemplate;
  /** `APP_PATTERN`: every list-prefix parameter must match it. */
  readonly appPattern?: RegExp;
  /** A reason to shed pushes right now, or null. */
  readonly shedReason?: () => string | null;
  /** MAX_INFLIGHT_BYTES: body bytes, then rows' cost, of the pushes in flight. */
  readonly inflightBudget?: ByteBudget;
  /** Whether a body of this size is scanned by `prepareBatch` (the push encodes its file itself). */
  readonly encodesBody: (bytes: number) => boolean;
  /** The thread large queued bodies are checked on (shared/envelope-scan-thread.ts); without it, the event loop. */
  readonly scanThread?: () => EnvelopeScanThread;
  /** The inline encoder needs the body as text; the queued path never decodes it. */
  readonly needsText: boolean;
  /** Whether an Idempotency-Key is already claimed (read-only): a keyed retry is answered before the app's budget is charged. */
  readonly keyClaimed?: (
    params: Readonly<Record<string, string>>,
    key: string,
    decodedHash: string,
  ) => Promise<boolean | Unavailable>;
  readonly observer?: AdmissionObserver;
}

/** What the steps start from: the request, and the budget it holds (given back by `Admission.admit` once the push is answered). */
export interface Admitting {
  readonly input: AdmissionInput;
  readonly held: { bytes: number };
}

/** After the params step: the checked params (the batch id's included). */
export interface WithParams extends Admitting {
  readonly params: Record<string, string>;
}

/** After the headers step: the body's coding and the Idempotency-Key. */
export interface WithHeaders extends WithParams {
  readonly coding: ContentCoding;
  readonly idempotencyKey: string | undefined;
}

/** After the body is read. */
export interface WithBody extends WithHeaders {
  readonly body: ReadBody;
}

/** After the envelope check: the events counted (and the body prepared, for a size the plugin encodes). */
export interface Checked extends WithBody {
  readonly check: { events: number; text?: string; everyEventHasMessageId: boolean; prepared?: PreparedBatch };
}

export type { PreparedBatch };
