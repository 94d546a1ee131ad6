/**
 * `npm run chaos -- --short` as CI runs it: processes killed with SIGKILL, Redis restarted from
 * its AOF, the store failing for 10 s, under continuous pushes. The script itself checks every
 * acknowledged push against the files DuckDB reads back; this test holds it to its exit code
 * and its table.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

interface ChaosResult {
  acknowledged: number;
  written: number;
  lost: number;
  duplicated: number;
  incomplete: number;
  files: number;
  listed: number;
  listInOrder: boolean;
  deadLettered: number;
}

describe('chaos (short mode)', () => {
  it('loses nothing acknowledged and writes nothing twice', { timeout: 280_000 }, async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/chaos.ts', '--short'], {
      cwd: join(import.meta.dirname, '../..'),
      env: { ...process.env, CHAOS_SHORT: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    // The script has its own hard limit (240 s); this one only guards against a wedged child.
    const guard = setTimeout(() => child.kill('SIGINT'), 260_000);
    const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    clearTimeout(guard);
    const line = out.split('\n').find((l) => l.startsWith('CHAOS_RESULT '));
    // The tail holds the table, or the error that stopped the run.
    expect(line, out.slice(-4000)).toBeDefined();
    const result = JSON.parse((line as string).slice('CHAOS_RESULT '.length)) as ChaosResult;
    expect(code, out.slice(-4000)).toBe(0);
    expect(out).toMatch(/\| lost +\| +0 \|/);
    expect(out).toMatch(/\| duplicated +\| +0 \|/);
    expect(result.lost).toBe(0);
    expect(result.duplicated).toBe(0);
    expect(result.incomplete).toBe(0);
    expect(result.deadLettered).toBe(0);
    expect(result.acknowledged).toBeGreaterThan(50);
    expect(result.written).toBe(result.acknowledged);
    expect(result.listed).toBe(result.files);
    expect(result.listInOrder).toBe(true);
    // Every fault was injected.
    for (const step of [
      'kill -9 encoder 1',
      'kill -9 both encoders while batch',
      'kill -9 redis-server',
      'kill -9 the API',
      'store outage',
    ])
      expect(out).toContain(step);
  });
});
