import { describe, expect, it } from 'vitest';
import { formatGcSummary, parseGcLine, summarizeGc } from '../../bench/gc-trace.js';

// Lines as Node 20 and Node 24 print them with --trace-gc-nvp (cut after the fields read here).
const NODE20_SCAVENGE =
  '[7433:0x26b8fdd0]     4765 ms: pause=6.1 mutator=237.9 gc=s reduce_memory=0 time_to_safepoint=0.00 scavenge=5.89 scavenge.roots=0.04 allocated=12300528 promoted=1943888 new_space_survived=2960704 promotion_rate=99.8%';
const NODE20_MARK_COMPACT =
  '[20001:0x1a0addd0]    11611 ms: pause=5.0 mutator=20.7 gc=mc reduce_memory=0 time_to_safepoint=0.00 heap.prologue=0.00';
const NODE24_SCAVENGE =
  '[15932:0x41293000:0] 4335 ms: pause=8.4 mutator=2509.2 gc=s reduce_memory=0 interleaved=0 scavenge=6.49 scavenge.roots=0.09 promoted=491520';

describe('--trace-gc-nvp lines', () => {
  it('reads the pid, the kind, the pause and the bytes promoted, in both Node formats', () => {
    expect(parseGcLine(NODE20_SCAVENGE)).toEqual({ pid: 7433, kind: 's', pauseMs: 6.1, promoted: 1943888 });
    expect(parseGcLine(NODE20_MARK_COMPACT)).toEqual({ pid: 20001, kind: 'mc', pauseMs: 5, promoted: 0 });
    expect(parseGcLine(NODE24_SCAVENGE)).toEqual({ pid: 15932, kind: 's', pauseMs: 8.4, promoted: 491520 });
  });

  it('does not take `scavenge=` or `mutator=` for the fields it reads', () => {
    const e = parseGcLine('[1:0xab] 1 ms: mutator=99.0 pause=2.5 gc=s scavenge=7.0 new_space_promoted=5 promoted=10');
    expect(e).toEqual({ pid: 1, kind: 's', pauseMs: 2.5, promoted: 10 });
  });

  it('skips what is not one: log lines, a line cut before its pause, --trace-gc lines', () => {
    expect(parseGcLine('{"level":30,"msg":"request","status":201}')).toBeUndefined();
    expect(parseGcLine('[7433:0x26b8fdd0]     4765 ms: ')).toBeUndefined();
    expect(
      parseGcLine('[5964:0x34f6adb0]     6077 ms: Scavenge 49.7 (86.2) -> 39.1 (86.2) MB, 3.57 / 0.16 ms'),
    ).toBeUndefined();
    expect(parseGcLine('')).toBeUndefined();
  });
});

describe('summarizeGc', () => {
  it('totals each process: scavenges and their mean pause and promotion, full collections, the longest pause', () => {
    const events = [
      { pid: 10, kind: 's', pauseMs: 4, promoted: 2_000_000 },
      { pid: 20, kind: 's', pauseMs: 1, promoted: 100 },
      { pid: 10, kind: 's', pauseMs: 2, promoted: 1_000_000 },
      { pid: 10, kind: 'mc', pauseMs: 9, promoted: 0 },
    ];
    const [api, encoder] = summarizeGc(events);
    expect(api).toEqual({
      pid: 10,
      scavenges: 2,
      fullCollections: 1,
      totalPauseMs: 15,
      maxPauseMs: 9,
      meanScavengePauseMs: 3,
      promotedPerScavenge: 1_500_000,
    });
    expect(encoder).toMatchObject({ pid: 20, scavenges: 1, fullCollections: 0, promotedPerScavenge: 100 });
    expect(formatGcSummary(api!, 'API process')).toBe(
      'API process: 2 scavenges (mean 3.0 ms, 1,465 KB promoted each), 1 full, pauses 15 ms in all, longest 9.0 ms',
    );
  });

  it('has nothing to say about no events, and no division by zero for a process that only ran full collections', () => {
    expect(summarizeGc([])).toEqual([]);
    const [only] = summarizeGc([{ pid: 3, kind: 'mc', pauseMs: 5, promoted: 0 }]);
    expect(only).toMatchObject({ scavenges: 0, meanScavengePauseMs: 0, promotedPerScavenge: 0, fullCollections: 1 });
  });
});
