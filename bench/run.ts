/**
 * `npm run bench [-- --smoke] [-- --only <scenario>]`: runs the scenarios side by side with the
 * reference implementation, prints one table of ours / reference ratios and writes the rows as
 * JSON to bench/results/<timestamp>.json.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './lib.js';
import type { BenchContext, BenchRow, Scenario } from './types.js';

interface ScenarioEntry {
  name: string;
  /** Module path relative to this file; loaded lazily so `--only` does not import the rest. */
  module: string;
  optional?: boolean;
}

const SCENARIOS: ScenarioEntry[] = [
  { name: 'encoder', module: './scenarios/encoder.js' },
  { name: 'scanner', module: './scenarios/scanner.js' },
  { name: 'e2e', module: './scenarios/e2e.js' },
  { name: 'redis-memory', module: './scenarios/redis-memory.js' },
  { name: 'scaling', module: './scenarios/scaling.js' },
  { name: 'rollup', module: './scenarios/rollup.js' },
  { name: 'iceberg', module: './scenarios/iceberg.js' },
  { name: 'erase', module: './scenarios/erase.js' },
  { name: 'codec', module: './scenarios/codec.js' },
  { name: 'segment', module: './scenarios/segment.js' },
  // Written by another engineer; skipped when the file is not there.
  { name: 'list', module: './scenarios/list.js', optional: true },
  { name: 'rate-limit', module: './scenarios/rate-limit.js', optional: true },
];

function parseArgs(argv: string[]): { smoke: boolean; only: string | undefined } {
  let smoke = false;
  let only: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--smoke') smoke = true;
    else if (a === '--only') only = argv[++i];
    else if (a.startsWith('--only=')) only = a.slice(7);
    else if (a === '--help' || a === '-h') {
      process.stdout.write(
        `usage: npm run bench [-- --smoke] [-- --only <${SCENARIOS.map((s) => s.name).join('|')}>]\n`,
      );
      process.exit(0);
    } else throw new Error(`unknown argument ${a}`);
  }
  if (only !== undefined && !SCENARIOS.some((s) => s.name === only))
    throw new Error(`--only: unknown scenario "${only}"`);
  return { smoke, only };
}

function makeProgress(): { progress(message: string, opts?: { keep?: boolean }): void; done(): void } {
  const tty = process.stderr.isTTY === true;
  const start = Date.now();
  let last = '';
  let lastPrinted = 0;
  return {
    progress(message, opts = {}) {
      const line = `[bench ${((Date.now() - start) / 1000).toFixed(0).padStart(4)} s] ${message}`;
      if (line === last) return;
      last = line;
      if (tty) process.stderr.write(`\r\x1b[2K${line.slice(0, (process.stderr.columns || 120) - 1)}`);
      else {
        // In a log (CI, a pipe) a counter ticking every 50 ms would flood it: one line per second.
        const now = Date.now();
        if (now - lastPrinted < 1000 && !opts.keep) return;
        lastPrinted = now;
        process.stderr.write(`${line}\n`);
      }
    },
    done() {
      if (tty) process.stderr.write('\r\x1b[2K');
    },
  };
}

function fmt(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return '—';
  const a = Math.abs(n);
  if (a >= 1000) return Math.round(n).toLocaleString('en-US');
  if (a >= 100) return n.toFixed(0);
  if (a >= 10) return n.toFixed(1);
  if (a >= 1) return n.toFixed(2);
  return n.toPrecision(3);
}

/** The results as a Markdown table (what the issue note and docs quote). */
export function formatTable(rows: readonly BenchRow[]): string {
  const head = ['scenario', 'metric', 'unit', 'ours', 'reference', 'ratio', 'target', 'pass'];
  const body = rows.map((r) => [
    r.scenario,
    r.metric,
    r.unit,
    fmt(r.ours),
    fmt(r.reference),
    r.ratio === undefined ? '—' : `${r.ratio.toFixed(2)}×`,
    r.target ?? '',
    r.pass === undefined ? '' : r.pass ? 'yes' : 'NO',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells: string[]): string => `| ${cells.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  return [line(head), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...body.map(line)].join('\n');
}

async function main(): Promise<void> {
  const { smoke, only } = parseArgs(process.argv.slice(2));
  const ui = makeProgress();
  const ctx: BenchContext = { smoke, progress: ui.progress };
  const rows: BenchRow[] = [];
  const failures: { scenario: string; error: string }[] = [];
  const started = new Date();
  for (const s of SCENARIOS) {
    if (only !== undefined && s.name !== only) continue;
    if (s.optional && !existsSync(join(import.meta.dirname, s.module.replace(/\.js$/, '.ts')))) {
      ui.progress(`${s.name}: not present, skipped`);
      continue;
    }
    ui.progress(`${s.name}: starting`);
    try {
      const mod = (await import(s.module)) as { run?: Scenario };
      if (typeof mod.run !== 'function') throw new Error(`${s.module} does not export run`);
      rows.push(...(await mod.run(ctx)));
    } catch (err) {
      // One broken scenario must not hide the others' numbers; it is reported and fails the run.
      failures.push({ scenario: s.name, error: (err as Error).stack ?? String(err) });
    }
  }
  ui.done();
  const resultsDir = join(ROOT, 'bench', 'results');
  mkdirSync(resultsDir, { recursive: true });
  const file = join(resultsDir, `${started.toISOString().replace(/[:.]/g, '-')}${smoke ? '-smoke' : ''}.json`);
  const meta = {
    started: started.toISOString(),
    finished: new Date().toISOString(),
    smoke,
    only: only ?? null,
    node: process.version,
    cpus: (await import('node:os')).cpus().length,
  };
  writeFileSync(file, `${JSON.stringify({ ...meta, rows, failures }, null, 2)}\n`);
  process.stdout.write(`\n${formatTable(rows)}\n\nresults: ${file}\n`);
  for (const f of failures) process.stderr.write(`\nscenario ${f.scenario} failed:\n${f.error}\n`);
  process.exitCode = failures.length > 0 ? 1 : 0;
}

await main();
