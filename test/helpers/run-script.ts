import { spawn } from 'node:child_process';
import { resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '../..');

/**
 * Runs one of the repository's TypeScript scripts as `npm run` does (`node --import tsx <entry>`,
 * from the repository root) and resolves with its exit code and output once it exits. Bounded: a
 * run still going after `killAfterMs` is killed (its code is then `null`). Only the last 20,000
 * characters of stderr are kept.
 */
export function runTsScript(
  entry: string,
  args: string[],
  opts: { env?: Record<string, string>; killAfterMs: number },
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ['--import', 'tsx', entry, ...args], {
      cwd: ROOT,
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-20_000)));
    const t = setTimeout(() => child.kill('SIGKILL'), opts.killAfterMs);
    child.once('exit', (code) => {
      clearTimeout(t);
      done({ code, stdout, stderr });
    });
  });
}
