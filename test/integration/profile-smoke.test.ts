/**
 * `npm run profile` end to end, briefly: it loads the compiled service with 10-event batches for
 * a second, waits for every batch to be written, and summarizes the API's and the encoder's CPU
 * profiles and (`--gc`) their garbage collections. Speeds are not asserted (they belong to full
 * runs); only that each part is there.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runTsScript } from '../helpers/run-script.js';

describe('npm run profile', () => {
  it('prints CPU per batch and where the API and the encoder spent it', { timeout: 120_000 }, async () => {
    const out = mkdtempSync(join(tmpdir(), 'profile-smoke-'));
    try {
      const { code, stdout, stderr } = await runTsScript(
        'bench/profile.ts',
        ['--size', '10', '--seconds', '1', '--top', '5', '--out', out, '--gc'],
        {
          // Bounded: a hung run is killed rather than holding the suite.
          killAfterMs: 110_000,
        },
      );
      expect(code, stderr).toBe(0);
      expect(stderr).toContain('[profile] measuring: 1 s of 10-event batches at saturation');
      const accepted = /(\d+) accepted \(\d+\/s\), 0 failed/.exec(stdout);
      expect(accepted, stdout).not.toBeNull();
      expect(Number(accepted?.[1])).toBeGreaterThan(0);
      expect(stdout).toMatch(/^durable \d+ events\/s/m);
      const cpu = /CPU per batch \(ms\): all ([\d.]+) = API event loop ([\d.]+) \+ encoders' event loops ([\d.]+)/.exec(
        stdout,
      );
      expect(cpu, stdout).not.toBeNull();
      for (const v of cpu?.slice(1) ?? []) expect(Number(v)).toBeGreaterThan(0);
      // One summary per process, each with five modules and five functions that carry a share.
      for (const who of ['API process', 'encoder process 1']) {
        const at = stdout.indexOf(`${who} (CPU.`);
        expect(at, `${who}'s summary in:\n${stdout}`).toBeGreaterThanOrEqual(0);
        const block = stdout.slice(at).split('\n\n')[0] as string;
        expect(block.match(/^ {4}\s*\d+\.\d%  \S/gm)?.length, block).toBe(10);
      }
      // --gc: V8's trace lines were read over the window; a second of saturation collects in the API.
      expect(stdout).toContain('garbage collection over the measured window (--trace-gc-nvp):');
      expect(stdout, stdout).toMatch(
        /^ {2}API process: [1-9]\d* scavenges \(mean [\d.]+ ms, [\d,]+ KB promoted each\), \d+ full/m,
      );
      expect(readdirSync(out).filter((f) => f.endsWith('.cpuprofile')).length).toBeGreaterThanOrEqual(2);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});
