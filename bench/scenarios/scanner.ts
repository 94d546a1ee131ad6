/**
 * Scenario — the push-body validator's cost per byte over adversarial shapes (issue 37, "One
 * request can stall the API for seconds"). For each shape of test/helpers/adversarial-bodies.ts,
 * an 8 MB body is scanned (`scanEnvelope`, the API's check) and prepared (`prepareBatch`, the
 * API's own encode path, the encoder's scan and column copy) against a plain 8 MB body of typical
 * ~330-byte events, fastest of several runs each, in turn. The `reference` column of these rows
 * is the plain body, so `ratio` is the shape's time per byte over plain's: the target for
 * the scan is at most 3x.
 */
import { scanEnvelope } from '../../shared/envelope.js';
import { prepareBatch } from '../../shared/parquet/encode.js';
import { ADVERSARIAL_SHAPES, adversarialBody, plainBody } from '../../test/helpers/adversarial-bodies.js';
import { row } from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';

/** The bound: an adversarial body's validation time within 3x a plain body's, per byte. */
const SCAN_RATIO_TARGET = 3;

function timed(fn: () => { ok: boolean }): number {
  const t0 = performance.now();
  const r = fn();
  const ms = performance.now() - t0;
  if (!r.ok) throw new Error('a bench body was refused');
  return ms;
}

/** Fastest time of `fn` on `plain` and on `body`, alternating, in ns per byte. */
function perByte(
  fn: (b: Uint8Array) => { ok: boolean },
  plain: Uint8Array,
  body: Uint8Array,
  rounds: number,
): { plain: number; body: number; bodyMs: number } {
  fn(plain);
  fn(body);
  let p = Infinity;
  let a = Infinity;
  for (let r = 0; r < rounds; r++) {
    p = Math.min(
      p,
      timed(() => fn(plain)),
    );
    a = Math.min(
      a,
      timed(() => fn(body)),
    );
  }
  return { plain: (p * 1e6) / plain.length, body: (a * 1e6) / body.length, bodyMs: a };
}

export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  const size = ctx.smoke ? 1_000_000 : 8_000_000;
  const rounds = ctx.smoke ? 2 : 9;
  const mb = `${size / 1e6} MB`;
  const plain = Buffer.from(plainBody(size));
  const rows: BenchRow[] = [];
  const shapes = Object.keys(ADVERSARIAL_SHAPES);
  const bodies = shapes.map((shape) => Buffer.from(adversarialBody(shape, size)));
  let worstScanMs = 0;
  // All scans first: prepareBatch allocates column buffers, and the collections that follow would
  // land in the scans' timings.
  for (const [i, shape] of shapes.entries()) {
    ctx.progress(`scanner: scan, ${shape}`);
    const scan = perByte((b) => scanEnvelope(b), plain, bodies[i], rounds);
    worstScanMs = Math.max(worstScanMs, scan.bodyMs);
    rows.push(
      row({
        scenario: 'scanner',
        metric: `scan (reference: plain events), ${shape}`,
        unit: 'ns/B',
        ours: scan.body,
        reference: scan.plain,
        ratioTarget: { op: '<=', value: SCAN_RATIO_TARGET },
      }),
    );
    await new Promise((r) => setImmediate(r));
  }
  for (const [i, shape] of shapes.entries()) {
    ctx.progress(`scanner: prepareBatch, ${shape}`);
    // prepareBatch also copies every row into its column buffers: a body of millions of tiny
    // events costs rows, not keys (and is refused past maxEventsPerBatch before it is queued).
    const prepare = perByte((b) => prepareBatch(b), plain, bodies[i], Math.max(2, rounds >> 2));
    rows.push(
      row({
        scenario: 'scanner',
        metric: `prepareBatch (reference: plain events), ${shape}`,
        unit: 'ns/B',
        ours: prepare.body,
        reference: prepare.plain,
      }),
    );
    await new Promise((r) => setImmediate(r));
  }
  rows.push(
    row({
      scenario: 'scanner',
      metric: `slowest scan of a ${mb} body (any shape above)`,
      unit: 'ms',
      ours: worstScanMs,
    }),
  );
  return rows;
}
