/**
 * `npm run profile` end to end, briefly: it loads the compiled service with 10-event batches for
 * a second, waits for every batch to be written, and summarizes the API's and the encoder's CPU
 * profiles. Speeds are not asserted (they belong to full runs); only that each part is there.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');

function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'bench/profile.ts', ...args], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-20_000)));
    // Bounded: a hung run is killed rather than holding the suite.
    const t = setTimeout(() => child.kill('SIGKILL'), 110_000);
    child.once('exit', (code) => {
      clearTimeout(t);
      done({ code, stdout, stderr });
    });
  });
}

describe('npm run profile', () => {
  it('prints CPU per batch and where the API and the encoder spent it', { timeout: 120_000 }, async () => {
    const out = mkdtempSync(join(tmpdir(), 'profile-smoke-'));
    try {
      const { code, stdout, stderr } = await run(['--size', '10', '--seconds', '1', '--top', '5', '--out', out]);
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
      expect(readdirSync(out).filter((f) => f.endsWith('.cpuprofile')).length).toBeGreaterThanOrEqual(2);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});
