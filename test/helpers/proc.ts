import { type ChildProcess, spawn } from 'node:child_process';
import { resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '../..');

export interface ServiceProcess {
  child: ChildProcess;
  /** Everything the process printed so far (stdout + stderr). */
  output(): string;
  /** Sends `signal` and waits for the exit code (SIGKILL after `ms`). */
  stop(signal?: NodeJS.Signals, ms?: number): Promise<number | null>;
  exited(): Promise<number | null>;
}

/**
 * Runs one of the product's entry points as `npm start` would, with `env` added. Node loads tsx
 * in-process (`--import tsx`) so the pid is the service itself: the `tsx` command would fork a
 * child that outlives a SIGKILL sent to it.
 */
export function startService(entry: 'services/main.ts' | 'services/api/main.ts' | 'services/encoder/main.ts', env: Record<string, string>): ServiceProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', entry], { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'info', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  const exit = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return {
    child,
    output: () => out,
    exited: () => exit,
    async stop(signal = 'SIGTERM', ms = 20_000) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill(signal);
      const t = setTimeout(() => child.kill('SIGKILL'), ms);
      const code = await exit;
      clearTimeout(t);
      return code;
    },
  };
}

/** Polls `url` until it answers 200 (bounded by `ms`). */
export async function waitForHttp(url: string, ms = 20_000, proc?: ServiceProcess): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (proc && proc.child.exitCode !== null) throw new Error(`process exited (${proc.child.exitCode}):\n${proc.output()}`);
    try {
      const r = await fetch(url);
      if (r.ok) return;
    } catch {
      /* not up yet */
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer within ${ms} ms${proc ? `:\n${proc.output()}` : ''}`);
}

/** Polls `fn` until it returns a truthy value (bounded by `ms`). */
export async function waitFor<T>(fn: () => Promise<T | undefined | null | false>, ms = 20_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
}
