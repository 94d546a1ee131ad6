import { batchIdMs } from '../../../../shared/ids.js';
import type { PreparedBatch } from '../../../../shared/parquet/encode.js';
import { batchKey } from '../../../../shared/paths.js';
import { type BatchJob, packBody, packParquet } from '../../../../shared/redis/jobs/push.js';
import type { Built, Claimed, PushDeps } from '../context.js';
import { type Step, next } from '../runner.js';

/**
 * Step 2: the job of the batch. Its payload is the batch's Parquet file when the body was
 * prepared (the encoder then only writes it), else the JSON, deflated. A prepared body whose
 * encode fails here (it passed the same scan the encoder runs, so that is a bug, not bad data)
 * goes as JSON, and the encoder encodes it or dead-letters it with the reason.
 */
export function buildPayload(deps: PushDeps): Step<Claimed, Built> {
  async function payloadOf(
    body: Buffer,
    prepared: PreparedBatch | undefined,
    receivedAt: number,
  ): Promise<Pick<BatchJob, 'encoding' | 'body' | 'bodyBytes' | 'jsonBytes'>> {
    if (prepared) {
      const t0 = performance.now();
      try {
        const thread = deps.encodeThread?.();
        const writer = deps.compression === undefined ? {} : { compression: deps.compression };
        // A thread that does not answer in time (stuck, or far behind) costs the push its shortcut, not its answer.
        // The stamped stream moves to the thread (no copy): a failure falls back to the JSON, not to it.
        return packParquet(
          thread
            ? await deps.clock.within(
                thread.encode(prepared.stamp(receivedAt), { transfer: true, ...writer }),
                deps.enqueueTimeoutMs,
                'Parquet encode',
              )
            : prepared.toParquet(receivedAt, writer),
          body.length,
        );
      } catch (err) {
        // Falls through to the JSON payload.
        deps.observe.encodeFailed?.(err as Error);
      } finally {
        deps.observe.encodeSeconds?.((performance.now() - t0) / 1000);
      }
    }
    return packBody(body);
  }

  return {
    name: 'build-payload',
    async run(c) {
      if (c.queued) return next({ ...c, job: null });
      const { req, batchId } = c;
      const receivedAt = batchIdMs(batchId);
      const job: BatchJob = {
        v: 1,
        collection: deps.collection,
        key: batchKey(deps.template, req.params, batchId),
        prefix: c.prefix,
        params: { ...req.params },
        batchId,
        receivedAt,
        events: req.events,
        ...(await payloadOf(req.body, req.prepared, receivedAt)),
      };
      return next({ ...c, job });
    },
  };
}
