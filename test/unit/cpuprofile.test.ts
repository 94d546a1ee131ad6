import { describe, expect, it } from 'vitest';
import { type CpuProfile, formatSummary, moduleOf, summarizeProfile } from '../../bench/cpuprofile.js';

const ROOT = '/repo';

/** A profile whose samples are taken every 1,000 µs from startTime 5,000,000: `ids[i]` at 5,000,000 + (i + 1) × 1,000. */
function profile(ids: number[]): CpuProfile {
  const frame = (functionName: string, url: string, lineNumber = 0) => ({ functionName, url, lineNumber });
  return {
    nodes: [
      { id: 1, callFrame: frame('(root)', ''), children: [2, 3, 4, 5, 6] },
      { id: 2, callFrame: frame('(idle)', '') },
      { id: 3, callFrame: frame('scan', `file://${ROOT}/.tmp/test-dist/shared/envelope.js`, 9) },
      { id: 4, callFrame: frame('processChunkSync', 'node:zlib', 392) },
      { id: 5, callFrame: frame('moveToFinished', `file://${ROOT}/node_modules/bullmq/dist/cjs/classes/job.js`, 99) },
      { id: 6, callFrame: frame('(garbage collector)', '') },
    ],
    samples: ids,
    timeDeltas: ids.map(() => 1000),
    startTime: 5_000_000,
    endTime: 5_000_000 + ids.length * 1000,
  };
}

describe('moduleOf', () => {
  it('names our files by their source path, packages by name, and native frames by function', () => {
    expect(moduleOf(`file://${ROOT}/.tmp/test-dist/shared/envelope.js`, 'scan', ROOT)).toBe('shared/envelope.js');
    expect(moduleOf(`file://${ROOT}/dist/services/api/app.js`, 'x', ROOT)).toBe('services/api/app.js');
    expect(moduleOf(`file://${ROOT}/node_modules/@aws-sdk/client-s3/dist/index.js`, 'x', ROOT)).toBe(
      '@aws-sdk/client-s3',
    );
    expect(moduleOf(`file://${ROOT}/node_modules/a/node_modules/ioredis/built/Redis.js`, 'x', ROOT)).toBe('ioredis');
    expect(moduleOf('node:zlib', 'processChunkSync')).toBe('node:zlib');
    expect(moduleOf('wasm://wasm/012e380e', 'wasm-function[2060]')).toBe('wasm');
    expect(moduleOf('', 'writev')).toBe('writev');
    expect(moduleOf('', '')).toBe('(native)');
  });
});

describe('summarizeProfile', () => {
  it('shares are of busy samples, idle ones left out, largest first', () => {
    // 4 idle, 3 scan, 2 zlib, 1 bullmq.
    const s = summarizeProfile(profile([2, 2, 3, 3, 3, 4, 4, 5, 2, 2]), { root: ROOT });
    expect(s.samples).toBe(10);
    expect(s.busy).toBe(6);
    expect(s.modules).toEqual([
      { name: 'shared/envelope.js', share: 0.5 },
      { name: 'node:zlib', share: 2 / 6 },
      { name: 'bullmq', share: 1 / 6 },
    ]);
    expect(s.functions[0]).toEqual({ name: 'scan shared/envelope.js:10', share: 0.5 });
    expect(s.functions[1]?.name).toBe('processChunkSync node:zlib:393');
  });

  it('counts only the samples inside the window, on the profile clock', () => {
    // Samples at 5,001,000 … 5,010,000 µs; the window keeps the 4th to the 7th (3, 4, 4, 5).
    const s = summarizeProfile(profile([3, 3, 3, 3, 4, 4, 5, 6, 6, 6]), {
      root: ROOT,
      window: { fromUs: 5_004_000, toUs: 5_007_000 },
    });
    expect(s.samples).toBe(4);
    expect(s.busy).toBe(4);
    expect(s.modules.map((m) => [m.name, m.share])).toEqual([
      ['node:zlib', 0.5],
      ['bullmq', 0.25],
      ['shared/envelope.js', 0.25],
    ]);
  });

  it('keeps the top n, and an all-idle profile has no shares', () => {
    expect(summarizeProfile(profile([3, 4, 5, 6]), { top: 2 }).modules).toHaveLength(2);
    const idle = summarizeProfile(profile([2, 2]));
    expect(idle).toEqual({ samples: 2, busy: 0, modules: [], functions: [] });
    expect(formatSummary('API process', idle)[0]).toBe('API process: 2 samples, 0.0% busy');
  });

  it('formats shares as percentages', () => {
    const lines = formatSummary('encoder process 1', summarizeProfile(profile([3, 3, 4, 2]), { root: ROOT }));
    expect(lines).toEqual([
      'encoder process 1: 4 samples, 75.0% busy',
      '  by module (self):',
      '     66.7%  shared/envelope.js',
      '     33.3%  node:zlib',
      '  by function (self):',
      '     66.7%  scan shared/envelope.js:10',
      '     33.3%  processChunkSync node:zlib:393',
    ]);
  });
});
