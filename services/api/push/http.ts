import type { EnvelopeErrorCode } from '../../../shared/envelope.js';
import type { PushOutcome } from './outcome.js';

/**
 * The push path's only knowledge of HTTP, for the router (and the plugin's `push`): each outcome's
 * status, headers and JSON body. The service and its steps never import this file.
 */
export interface PushResponse {
  status: 200 | 400 | 422 | 503;
  headers: Record<string, string>;
  body: { hash: string; batchId: string | null } | { error: string };
}

export function pushResponse(outcome: PushOutcome): PushResponse {
  switch (outcome.kind) {
    case 'accepted':
    case 'duplicate':
      return { status: 200, headers: {}, body: { hash: outcome.hash, batchId: outcome.batchId } };
    case 'empty':
      return { status: 200, headers: {}, body: { hash: outcome.hash, batchId: null } };
    case 'conflict':
      return { status: 422, headers: {}, body: { error: outcome.reason } };
    case 'rejected':
      return { status: 400, headers: {}, body: { error: outcome.reason } };
    case 'unavailable':
      return { status: 503, headers: { 'Retry-After': String(outcome.retryAfter ?? 1) }, body: { error: `${outcome.reason}; retry later` } };
  }
}

/** The metric label of a refused body: not JSON (or not UTF-8) is `bad_json`, any other problem `bad_envelope`. */
export function envelopeRejectReason(code: EnvelopeErrorCode): 'bad_json' | 'bad_envelope' {
  return code === 'bad_json' || code === 'bad_utf8' ? 'bad_json' : 'bad_envelope';
}
