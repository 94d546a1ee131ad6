import { randomSuffix } from '../ids.js';
import type { ListBound, MintResult } from './ledger.js';

/**
 * In-process ledger for the library's inline mode (no Redis): the same promises as
 * BatchLedger, but only within one process.
 */
export class MemoryLedger {
  private lastMs = 0;
  private counter = 0;
  private lastId = '';
  private readonly pending = new Map<string, Set<string>>();

  /** Mints the next id (monotonic in this process) and marks it in flight under `prefix`. */
  async mint(prefix: string, opts: { clockMs?: number } = {}): Promise<MintResult> {
    let now = opts.clockMs ?? Date.now();
    if (now <= this.lastMs) {
      now = this.lastMs;
      this.counter += 1;
      if (this.counter > 9999) {
        now += 1;
        this.counter = 0;
      }
    } else this.counter = 0;
    this.lastMs = now;
    const id = `${String(now).padStart(13, '0')}-${String(this.counter).padStart(4, '0')}-${randomSuffix()}`;
    this.lastId = id;
    let set = this.pending.get(prefix);
    if (!set) this.pending.set(prefix, (set = new Set()));
    set.add(id);
    return { batchId: id, deduplicated: false, conflict: false };
  }

  async release(prefix: string, batchId: string): Promise<boolean> {
    const set = this.pending.get(prefix);
    const had = set?.delete(batchId) ?? false;
    if (set && set.size === 0) this.pending.delete(prefix);
    return had;
  }

  async listBound(prefix: string): Promise<ListBound> {
    const set = this.pending.get(prefix);
    if (set && set.size > 0) {
      let oldest = '';
      for (const id of set) if (!oldest || id < oldest) oldest = id;
      return { kind: 'below', id: oldest };
    }
    return this.lastId
      ? { kind: 'upTo', id: this.lastId }
      : { kind: 'below', id: String(Date.now()).padStart(13, '0') };
  }
}
