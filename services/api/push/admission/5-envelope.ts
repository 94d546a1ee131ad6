import { API_ENCODED_ROW_BYTES, API_QUEUED_ROW_BYTES, batchCost } from '../../../../shared/byte-budget.js';
import { type EnvelopeErrorCode, checkEnvelope } from '../../../../shared/envelope.js';
import { SCAN_THREAD_MIN_BYTES } from '../../../../shared/envelope-scan-thread.js';
import { type PrepareResult, prepareBatch } from '../../../../shared/parquet/encode.js';
import { type Step, done, next } from '../runner.js';
import { type AdmissionDeps, type Checked, type Refused, type WithBody, refused } from './types.js';

/** Seconds a push refused for lack of memory budget is told to wait: pushes in flight clear in about that. */
const ROWS_RETRY_AFTER_SECONDS = 1;

/** The refusal code (and metric label) of a refused body: not JSON (or not UTF-8) is `bad_json`, any other problem `bad_envelope`. */
export function envelopeRejectReason(code: EnvelopeErrorCode): 'bad_json' | 'bad_envelope' {
  return code === 'bad_json' || code === 'bad_utf8' ? 'bad_json' : 'bad_envelope';
}

type ScanResult = (Checked['check'] & { bytes: Buffer }) | { ok: false; error: string; code: EnvelopeErrorCode };

/**
 * The body's scan: {@link prepareBatch} for a size the plugin encodes itself (the scan also takes
 * its columns), else {@link checkEnvelope}; the same errors in the same words either way. Only an
 * inline encoder needs the text: a queued push never decodes its body (that string would double
 * every body in flight). A large queued body is checked, or prepared, on the scan thread, off the
 * event loop (shared/envelope-scan-thread.ts); it comes back as a new Buffer over the same memory.
 */
async function scan(deps: AdmissionDeps, bytes: Buffer): Promise<ScanResult | Refused> {
  const encodes = deps.encodesBody(bytes.length);
  if (deps.scanThread && !deps.needsText && bytes.length >= SCAN_THREAD_MIN_BYTES) {
    const length = bytes.length;
    try {
      const thread = deps.scanThread();
      // A new thread first loads the prepare's module (a few hundred ms): meanwhile bodies to
      // prepare are prepared here, not queued behind that load.
      if (encodes && !thread.prepareWarm) thread.warmPrepare();
      else {
        // A body of more events than the collection takes is only checked there: it is refused once counted.
        const done = encodes
          ? await thread.prepare(bytes, deps.collection.maxEventsPerBatch)
          : await thread.scan(bytes);
        if ('prepared' in done) return prepared(done.prepared, done.body);
        const r = done.check;
        return r.ok ? { events: r.events, everyEventHasMessageId: r.everyEventHasMessageId, bytes: done.body } : r;
      }
    } catch {
      // The thread is gone (or its scanner threw). A body it never took is checked here; one lost
      // with the thread cannot be, and is refused for a retry: nothing was stored.
      if (bytes.length !== length)
        return refused('unavailable', 'the body could not be checked (scan thread failed); retry later', {
          retryAfter: ROWS_RETRY_AFTER_SECONDS,
        });
    }
  }
  if (encodes) return prepared(prepareBatch(bytes), bytes);
  const r = checkEnvelope(bytes, { text: deps.needsText });
  return r.ok ? { events: r.events, text: r.text, everyEventHasMessageId: r.everyEventHasMessageId, bytes } : r;
}

function prepared(r: PrepareResult, bytes: Buffer): ScanResult {
  return r.ok
    ? { events: r.batch.rows, everyEventHasMessageId: r.everyEventHasMessageId, prepared: r.batch, bytes }
    : { ok: false, error: r.reason, code: r.code };
}

/**
 * Step 5: the envelope (`bad_json`, `bad_envelope`), the collection's maxEventsPerBatch
 * (`too_large`), and the rows' own memory cost charged to the in-flight budget once counted
 * (`overloaded` with a wait when it does not fit).
 */
export function envelope(deps: AdmissionDeps): Step<WithBody, Checked, Refused> {
  const { collection, inflightBudget, observer } = deps;
  return {
    name: 'envelope',
    async run(c) {
      const scanned = await scan(deps, c.body.bytes);
      if ('kind' in scanned) return done(scanned);
      if ('ok' in scanned) {
        const check = scanned;
        const code = envelopeRejectReason(check.code);
        observer?.rejected?.(code);
        return done(refused(code, check.error));
      }
      const { bytes, ...check } = scanned;
      if (check.events > collection.maxEventsPerBatch) {
        observer?.rejected?.('too_large');
        return done(
          refused(
            'too_large',
            `data.events has ${check.events} events; this collection's maxEventsPerBatch is ${collection.maxEventsPerBatch}`,
          ),
        );
      }
      if (inflightBudget) {
        const rowsCost = batchCost(check.events, 0, check.prepared ? API_ENCODED_ROW_BYTES : API_QUEUED_ROW_BYTES);
        if (!inflightBudget.tryTake(rowsCost, c.held.bytes)) {
          observer?.shed?.('inflight_bytes');
          const detail = `overloaded: the ${check.events} events of this push do not fit this process' memory budget for pushes in flight (MAX_INFLIGHT_BYTES); retry later`;
          return done(refused('overloaded', detail, { retryAfter: ROWS_RETRY_AFTER_SECONDS }));
        }
        c.held.bytes += rowsCost;
      }
      return next({ ...c, body: { ...c.body, bytes }, check });
    },
  };
}
