/**
 * The README as a newcomer follows it: the Quick start sets the token, then the Walk-through's
 * shell block is pasted into bash step by step against the product the Quick start starts. Only
 * the address changes (`http://localhost:8787` becomes this test's port); the folder it runs in
 * is laid out like a checkout (`bin/` and `data/`, the product's DATA_DIR), so `$PWD/data` and
 * `node bin/events-ingest.mjs` mean what they mean in a clone.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { type ServiceProcess, startService, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';
import { uniqueName } from '../helpers/names.js';

const ROOT = resolve(import.meta.dirname, '../..');
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const ID = /^\d{13}-\d{4}-[0-9a-z]{6}$/m;
const MARK = '@@step';

/** The first ```sh block of a `## <title>` section. */
function shellBlock(title: string): string {
  const section = README.split(/^## /m).find((s) => s.startsWith(`${title}\n`)) ?? '';
  return /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? '';
}

/** The block cut at blank lines: one step each, in order. */
function stepsOf(block: string): string[] {
  return block
    .split(/\n\s*\n/)
    .map((s) => s.trim())
    .filter(Boolean);
}

/** One bash script that runs every step in turn and prints a marker with its exit code after each. */
function scriptOf(steps: readonly string[]): string {
  return steps.map((s, i) => `${s}\nprintf '\\n${MARK} ${i} rc=%d\\n' "$?"`).join('\n');
}

/** The output of each step, and its exit code, split at the markers. */
function outputsOf(stdout: string, count: number): { out: string; rc: number }[] {
  const found: { out: string; rc: number }[] = [];
  let rest = stdout;
  for (let i = 0; i < count; i++) {
    const m = new RegExp(`\\n?${MARK} ${i} rc=(\\d+)\\n`).exec(rest);
    if (!m) break;
    found.push({ out: rest.slice(0, m.index), rc: Number(m[1]) });
    rest = rest.slice(m.index + m[0].length);
  }
  return found;
}

function bash(
  script: string,
  cwd: string,
  ms: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      'bash',
      ['-c', script],
      { cwd, timeout: ms, killSignal: 'SIGKILL', maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        done({ code: err ? (typeof err.code === 'number' ? err.code : null) : 0, stdout, stderr });
      },
    );
  });
}

describe('README Quick start + Walk-through', () => {
  const work = mkdtempSync(join(tmpdir(), 'ingest-readme-'));
  let svc: ServiceProcess | undefined;
  afterAll(async () => {
    await svc?.stop('SIGTERM');
    rmSync(work, { recursive: true, force: true });
  });

  it('shows both setup commands verbatim and sets the token the walk-through uses', () => {
    const quick = shellBlock('Quick start');
    expect(quick).toContain('npm ci && npm start');
    expect(shellBlock('Tests')).toMatch(/^npm test\b/m);
    const tokenOf = (block: string): string | undefined => /^export ADMIN_TOKEN=(\S+)/m.exec(block)?.[1];
    expect(tokenOf(quick), 'the Quick start exports ADMIN_TOKEN before npm start').toBeDefined();
    expect(quick.indexOf('export ADMIN_TOKEN')).toBeLessThan(quick.indexOf('npm start'));
    expect(tokenOf(shellBlock('Walk-through'))).toBe(tokenOf(quick));
  });

  it('the walk-through captures its ids and starts the CLI without npx', () => {
    const walk = shellBlock('Walk-through');
    const code = walk
      .split('\n')
      .map((l) => l.replace(/(^|\s)#.*$/, ''))
      .join('\n');
    expect(code, 'no batch id written into a command').not.toMatch(/\d{13}-\d{4}-[0-9a-z]{6}/);
    expect(code).toMatch(/^ID=\$\(curl /m);
    expect(code).toContain('/pull/events/myapp/$ID');
    expect(code).not.toMatch(/\bnpx\b/);
    expect(code).toMatch(/^node bin\/events-ingest\.mjs query /m);
  });

  it(
    'pasted into bash in order: push answers an id, the list shows it, the pull saves Parquet, the CLI queries it',
    { timeout: 180_000 },
    async () => {
      const token = /^export ADMIN_TOKEN=(\S+)/m.exec(shellBlock('Quick start'))?.[1] as string;
      // A checkout's shape: the CLI's entry and the data folder npm start writes.
      symlinkSync(join(ROOT, 'bin'), join(work, 'bin'));
      const dataDir = join(work, 'data');
      const port = await freePort();
      svc = startService('services/main.ts', {
        ADMIN_TOKEN: token,
        PORT: String(port),
        HOST: '127.0.0.1',
        DATA_DIR: dataDir,
        REDIS_URL: inject('redisUrl'),
        QUEUE_NAME: uniqueName('readme'),
        LOG_LEVEL: 'warn',
      });
      const base = `http://127.0.0.1:${port}`;
      await waitForHttp(`${base}/readyz`, 60_000, svc);

      const walk = shellBlock('Walk-through');
      expect(walk).toContain('http://localhost:8787');
      const steps = stepsOf(walk.replaceAll('http://localhost:8787', base));
      const ran = await bash(scriptOf(steps), work, 120_000);
      const outs = outputsOf(ran.stdout, steps.length);
      expect(outs.length, `every step ran (stderr: ${ran.stderr})`).toBe(steps.length);
      expect(ran.code, ran.stderr).toBe(0);
      for (const [i, o] of outs.entries()) expect([i, o.rc], `${steps[i]}\n${o.out}`).toEqual([i, 0]);

      const outOf = (pattern: RegExp): string => {
        const i = steps.findIndex((s) => pattern.test(s));
        expect(i, String(pattern)).toBeGreaterThanOrEqual(0);
        return outs[i]?.out ?? '';
      };
      const id = ID.exec(outOf(/^ID=\$\(curl/m))?.[0];
      expect(id, 'the push answered 200 with a batch id').toBeDefined();
      expect(outOf(/^for i in/m)).toContain(`{"items":["${id}.parquet"],"hasMore":false}`);
      expect(outOf(/\?after=\$ID/)).toContain('{"items":[],"hasMore":false}');
      const pulled = outOf(/-o batch\.parquet/);
      expect(pulled).toMatch(/^HTTP\/1\.1 200/m);
      expect(pulled).toMatch(/^content-type: application\/vnd\.apache\.parquet/im);
      expect(pulled).toMatch(/^PAR1$/m);
      const file = readFileSync(join(work, 'batch.parquet'));
      expect([file.subarray(0, 4).toString(), file.subarray(-4).toString()]).toEqual(['PAR1', 'PAR1']);
      // Both queries: one `track` event, in one hour.
      const queried = outOf(/^node bin\/events-ingest\.mjs query/m);
      expect(queried).toMatch(/\btrack\b.*\b1\b/);
      expect(queried).toMatch(/\d{4}-\d{2}-\d{2}.*\b1\b/);
      // What a newcomer got without the token: 401.
      expect((await fetch(`${base}/list/events/myapp`)).status).toBe(401);
    },
  );
});
