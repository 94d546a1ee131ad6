import { StoreError } from '../../../shared/errors.js';
import { batchIdMs } from '../../../shared/ids.js';
import type { MemoryLedger } from '../../../shared/ledger/memory.js';
import { PARQUET_MIME_TYPE, type ParquetCompression, encodeBatch } from '../../../shared/parquet/encode.js';
import { type StoragePathTemplate, batchKey, listPrefix } from '../../../shared/paths.js';
import type { ObjectStore } from '../../../shared/store/types.js';
import { type PushOutcome, type PushRequest, unavailable } from './outcome.js';

/**
 * The library's push without a queue (single process, no Redis): the id from an in-process
 * ledger, the file encoded and written inside the push. The same outcomes as {@link PushService}.
 */
export class InlinePush {
  constructor(
    private readonly opts: {
      template: StoragePathTemplate;
      store: ObjectStore;
      ledger: MemoryLedger;
      compression?: ParquetCompression;
    },
  ) {}

  async accept(req: PushRequest): Promise<PushOutcome> {
    if (req.events === 0) return { kind: 'empty', hash: req.hash };
    const { template, store, ledger } = this.opts;
    const prefix = listPrefix(template, req.params);
    const { batchId } = await ledger.mint(prefix);
    try {
      const encoded = encodeBatch(req.text ?? '', batchIdMs(batchId), { compression: this.opts.compression });
      if (!encoded.ok) return { kind: 'rejected', reason: encoded.reason };
      await store.putBytes(batchKey(template, req.params, batchId), encoded.bytes, { contentType: PARQUET_MIME_TYPE });
    } catch (err) {
      if (err instanceof StoreError) return unavailable('store unavailable', false);
      throw err;
    } finally {
      await ledger.release(prefix, batchId);
    }
    return { kind: 'accepted', batchId, hash: req.hash, events: req.events };
  }
}
