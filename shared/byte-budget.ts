import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * A count of bytes a process holds at once (request bodies in the API, job bodies in the
 * encoder), with a limit. Reservations are plain numbers; whoever takes bytes gives them back.
 * What a batch takes is its memory cost ({@link batchCost}: its rows and its bytes), not only
 * its JSON length.
 */
export class ByteBudget {
  private used = 0;
  private readonly waiters: { bytes: number; resolve: () => void }[] = [];

  /** @param limit bytes that may be held at once; `onChange` sees the new total after every change. */
  constructor(
    readonly limit: number,
    private readonly onChange?: (used: number) => void,
  ) {
    if (!(limit > 0)) throw new Error(`byte budget must be positive, got ${limit}`);
  }

  /** Bytes held now. */
  get inUse(): number {
    return this.used;
  }

  /**
   * Takes `bytes` if they fit right now, else takes nothing and returns false. Never waits: the
   * API answers 503 rather than queueing request bodies it would have to hold meanwhile. Like
   * {@link take}, a request larger than the whole limit is granted when nothing else is held;
   * `alreadyHeld` (what the caller took before, for the same body) does not count as "else".
   */
  tryTake(bytes: number, alreadyHeld = 0): boolean {
    if (bytes <= 0) return true;
    const fits = this.used + bytes <= this.limit || this.used - alreadyHeld <= 0;
    if (!fits || this.waiters.length > 0) return false;
    this.add(bytes);
    return true;
  }

  /**
   * Waits until `bytes` fit, first come first served (a large request at the head is not starved
   * by small ones behind it). A request larger than the whole limit runs once nothing else is held.
   */
  async take(bytes: number): Promise<void> {
    if (bytes <= 0) return;
    if (this.waiters.length === 0 && this.fits(bytes)) {
      this.add(bytes);
      return;
    }
    await new Promise<void>((resolve) => this.waiters.push({ bytes, resolve }));
  }

  /** Gives back bytes taken with tryTake or take. */
  give(bytes: number): void {
    if (bytes <= 0) return;
    this.add(-Math.min(bytes, this.used));
    while (this.waiters.length > 0) {
      const head = this.waiters[0] as { bytes: number; resolve: () => void };
      if (!this.fits(head.bytes)) break;
      this.waiters.shift();
      this.add(head.bytes);
      head.resolve();
    }
  }

  private fits(bytes: number): boolean {
    return this.used + bytes <= this.limit || this.used === 0;
  }

  private add(delta: number): void {
    this.used += delta;
    this.onChange?.(this.used);
  }
}

/*
 * What a batch costs in memory is not its JSON length: every event becomes a row of eleven Arrow
 * columns (ten int32 offsets and an int64 `received_at`, 48 bytes) however few bytes it was sent
 * as, and the row is held more than once while the batch is turned into Parquet. An 8 MB body of
 * 2.66 M empty events (`{}`, 3 bytes each) took an encoder from 130 to 632 MB. So the budgets
 * charge `rows × per-row cost + bytes` ({@link batchCost}); the per-row costs are measured
 * (docs/operations.md, "Memory") on the worst shape, empty events, where the rows are all there is.
 */

/**
 * Bytes an encoder holds per row of a JSON batch it encodes, on top of the body's own bytes: the
 * column builders' offsets (40), the Arrow IPC stream's offsets and `received_at` (48), and
 * parquet-wasm's copy of the table and its page buffers (~100). Measured: 192-208 bytes per row
 * for 1-2.66 M empty events.
 */
export const ENCODER_ROW_BYTES = 200;

/**
 * Bytes the API holds per row of a body it encodes itself (API_ENCODE_MAX_BYTES): the builders'
 * offsets and the IPC stream (96 measured), the stream's copy in the encode thread (48), and that
 * thread's parquet-wasm memory (~100).
 */
export const API_ENCODED_ROW_BYTES = 256;

/**
 * Bytes the API holds per row of a body it only checks and queues as JSON: the check keeps
 * nothing per event (measured: under 1 byte per row), and the job payload is the deflated body.
 * A few bytes, so a body of many events is never free.
 */
export const API_QUEUED_ROW_BYTES = 4;

/** What a batch of `rows` events in `bytes` bytes costs a budget: `rows × perRow + bytes`. */
export function batchCost(rows: number, bytes: number, perRow: number): number {
  return Math.max(0, rows) * perRow + Math.max(0, bytes);
}

/** V8's full collection, exposed at run time (no `--expose-gc` on the command line); null where it cannot be. */
let fullGc: (() => void) | null | undefined;
function collectGarbage(): boolean {
  if (fullGc === undefined) {
    const own = (globalThis as { gc?: () => void }).gc;
    if (typeof own === 'function') fullGc = own;
    else {
      try {
        setFlagsFromString('--expose-gc');
        fullGc = runInNewContext('gc') as () => void;
      } catch {
        fullGc = null;
      }
    }
  }
  if (!fullGc) return false;
  fullGc();
  return true;
}

/** The services' {@link DrainCollector} `minPeak`: two 8 MB pushes in the API, one large batch in an encoder. */
export const DRAIN_COLLECT_MIN_PEAK = 16 * 1024 * 1024;

/**
 * Gives a process' memory back once a large burst has drained. After a burst the bodies, payloads
 * and columns it held are garbage, but V8 collects only when JavaScript allocates, and an idle
 * process allocates next to nothing: measured, an API that had taken 17 8 MB pushes still held
 * 164 MiB of dead Buffers (`nodejs_external_memory_bytes`) a minute later. So once a budget that
 * had held at least `minPeak` falls to zero and stays there for `delayMs`, one full collection
 * runs (30-80 ms for these heaps; at most once per `minIntervalMs`). Feed it every new total of
 * the budget ({@link ByteBudget}'s `onChange`).
 */
export class DrainCollector {
  private peak = 0;
  private timer: NodeJS.Timeout | undefined;
  private last = 0;
  /** Full collections run so far (tests, logs). */
  runs = 0;

  constructor(
    private readonly opts: { minPeak: number; delayMs?: number; minIntervalMs?: number; collect?: () => boolean } = {
      minPeak: 32 * 1024 * 1024,
    },
  ) {}

  note(used: number): void {
    this.peak = Math.max(this.peak, used);
    if (used > 0) {
      clearTimeout(this.timer);
      this.timer = undefined;
      return;
    }
    if (this.peak < this.opts.minPeak || this.timer) return;
    const wait = Math.max(this.opts.delayMs ?? 1000, this.last + (this.opts.minIntervalMs ?? 10_000) - Date.now());
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.peak = 0;
      this.last = Date.now();
      if ((this.opts.collect ?? collectGarbage)()) this.runs++;
    }, wait);
    this.timer.unref();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
