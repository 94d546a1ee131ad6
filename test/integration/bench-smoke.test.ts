/**
 * `npm run bench -- --smoke` end to end: the harness starts the reference server, our services and
 * their Redis, runs every scenario briefly and writes a results file with a number in every row.
 * Speeds are not asserted here (they belong to the full bench run); only that the numbers exist.
 */
import { existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runTsScript } from '../helpers/run-script.js';

const ROOT = resolve(import.meta.dirname, '../..');
const RESULTS = join(ROOT, 'bench', 'results');

interface ResultFile {
  smoke: boolean;
  rows: { scenario: string; metric: string; ours: unknown; reference?: unknown; ratio?: unknown }[];
  failures: unknown[];
}

function runSmoke(): Promise<{ code: number | null; stdout: string; stderr: string }> {
  // The e2e scenario's socket option (BENCH_REDIS_SOCKET=1) is the path smoke-tested; full runs use TCP.
  // Bounded: a hung harness is killed rather than holding the suite.
  return runTsScript('bench/run.ts', ['--smoke'], { env: { BENCH_REDIS_SOCKET: '1' }, killAfterMs: 270_000 });
}

describe('npm run bench -- --smoke', () => {
  it('writes a results file with a numeric row for every scenario', { timeout: 280_000 }, async () => {
    const before = new Set(existsSync(RESULTS) ? readdirSync(RESULTS) : []);
    const { code, stdout, stderr } = await runSmoke();
    expect(code, stderr).toBe(0);
    const created = readdirSync(RESULTS).filter((f) => !before.has(f) && f.endsWith('-smoke.json'));
    expect(created).toHaveLength(1);
    const file = join(RESULTS, created[0]);
    try {
      const result = JSON.parse(readFileSync(file, 'utf8')) as ResultFile;
      expect(result.smoke).toBe(true);
      expect(result.failures).toEqual([]);
      const scenarios = new Set(result.rows.map((r) => r.scenario));
      const expected = ['encoder', 'e2e', 'redis-memory', 'scaling', 'segment'];
      if (existsSync(join(ROOT, 'bench/scenarios/list.ts'))) expected.push('list');
      for (const s of expected) expect(scenarios, `scenario ${s} has rows`).toContain(s);
      for (const r of result.rows) {
        expect(typeof r.ours, `${r.scenario}: ${r.metric}`).toBe('number');
        expect(Number.isFinite(r.ours), `${r.scenario}: ${r.metric}`).toBe(true);
        if (r.reference !== undefined)
          expect(Number.isFinite(r.reference), `${r.scenario}: ${r.metric} reference`).toBe(true);
      }
      // The table on stdout carries the same rows.
      expect(stdout).toContain('| scenario');
      expect(stdout).toContain('durable events/s at saturation');
      expect(stdout).toContain('CPU per batch at saturation, 100-event batches: Redis (reached over its unix socket)');
      expect(stdout).toMatch(/CPU per batch at 60% load \(\d+ pushes\/s\), 100-event batches: all processes/);
    } finally {
      rmSync(file, { force: true });
    }
  });
});
