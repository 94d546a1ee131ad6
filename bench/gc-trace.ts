/**
 * V8's `--trace-gc-nvp` lines, summarized per process: how often each process collected, how long
 * its pauses were, and how much its young-generation collections (scavenges) promoted to the old
 * space. `npm run profile -- --gc` prints this for the measured window; pure logic, no I/O.
 *
 * A line looks like `[<pid>:0x<isolate>] <ms> ms: pause=3.9 mutator=... gc=s ... promoted=920504 ...`
 * (`gc=s` a scavenge, `gc=mc` a mark-compact, `gc=mmc` a minor mark-compact; Node 24 adds
 * `:<n>` after the isolate). Anything else (log lines, a line cut by another writer) is skipped.
 */

export interface GcEvent {
  pid: number;
  /** `s` scavenge, `mc` mark-compact, `mmc` minor mark-compact, or what V8 printed. */
  kind: string;
  pauseMs: number;
  /** Bytes a scavenge moved to the old space (0 when the line has no `promoted=`). */
  promoted: number;
}

const PID = /\[(\d+):0x[0-9a-f]+(?::\d+)?\]/;
const field = (line: string, name: string): string | undefined =>
  new RegExp(`(?:^|\\s)${name}=([^\\s]+)`).exec(line)?.[1];

/** One `--trace-gc-nvp` line, or undefined when the line is not one. */
export function parseGcLine(line: string): GcEvent | undefined {
  const pid = PID.exec(line)?.[1];
  const kind = field(line, 'gc');
  const pause = Number(field(line, 'pause'));
  if (pid === undefined || kind === undefined || !Number.isFinite(pause)) return undefined;
  const promoted = Number(field(line, 'promoted') ?? 0);
  return { pid: Number(pid), kind, pauseMs: pause, promoted: Number.isFinite(promoted) ? promoted : 0 };
}

export interface GcSummary {
  pid: number;
  scavenges: number;
  /** Mark-compacts and minor mark-compacts. */
  fullCollections: number;
  totalPauseMs: number;
  maxPauseMs: number;
  meanScavengePauseMs: number;
  /** Mean bytes promoted per scavenge. */
  promotedPerScavenge: number;
}

/** Per-process totals of `events`, in order of first appearance. */
export function summarizeGc(events: readonly GcEvent[]): GcSummary[] {
  const by = new Map<
    number,
    { s: number; full: number; total: number; max: number; sPause: number; promoted: number }
  >();
  for (const e of events) {
    const t = by.get(e.pid) ?? { s: 0, full: 0, total: 0, max: 0, sPause: 0, promoted: 0 };
    t.total += e.pauseMs;
    t.max = Math.max(t.max, e.pauseMs);
    if (e.kind === 's') {
      t.s++;
      t.sPause += e.pauseMs;
      t.promoted += e.promoted;
    } else t.full++;
    by.set(e.pid, t);
  }
  return [...by].map(([pid, t]) => ({
    pid,
    scavenges: t.s,
    fullCollections: t.full,
    totalPauseMs: t.total,
    maxPauseMs: t.max,
    meanScavengePauseMs: t.s ? t.sPause / t.s : 0,
    promotedPerScavenge: t.s ? t.promoted / t.s : 0,
  }));
}

/** One line per process: `API process: 41 scavenges (mean 3.9 ms, 1,665 KB promoted each), 1 full, pauses 171 ms in all, longest 9.1 ms`. */
export function formatGcSummary(s: GcSummary, role: string): string {
  const kb = Math.round(s.promotedPerScavenge / 1024).toLocaleString('en-US');
  return (
    `${role}: ${s.scavenges} scavenges (mean ${s.meanScavengePauseMs.toFixed(1)} ms, ${kb} KB promoted each), ` +
    `${s.fullCollections} full, pauses ${s.totalPauseMs.toFixed(0)} ms in all, longest ${s.maxPauseMs.toFixed(1)} ms`
  );
}
