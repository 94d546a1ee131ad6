/**
 * `npm run erasure-acceptance -- [--events 100000] [--batches 1000] [vitest args…]`: the erasure
 * acceptance test (test/integration/erasure-acceptance.test.ts), issue 36's acceptance 1-3 in the
 * issue's form: an app with 100,000 events in 1,000 batches plus rollups and an Iceberg table, a
 * folder kept with `sync`, two distinct ids and one anonymous id erased with `events-ingest erase
 * --wait` while a client keeps pushing, the rollup process `kill -9`ed in the scan and in the
 * iceberg step; then `query --store`, `query --table`, icebird, every pulled batch and the synced
 * folder (`query --dir`) are checked event by event, and every snapshot still named by a metadata
 * version is read. Prints a line per phase and one line of figures. `npm test` (system tier) runs
 * the same assertions with 10,000 events in 200 batches.
 */
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';

const int =
  (min: number, max: number) =>
  (raw: string): number => {
    const n = Number(raw);
    if (!/^\d{1,7}$/.test(raw) || n < min || n > max)
      throw new InvalidArgumentError(`must be an integer from ${min} to ${max}`);
    return n;
  };

const program = new Command()
  .name('erasure-acceptance')
  .description('Run the erasure acceptance test in its long form')
  .option('--events <n>', 'events pushed before the erasure', int(100, 1_000_000), 100_000)
  .option('--batches <n>', 'batches they are pushed in', int(10, 10_000), 1_000)
  .allowUnknownOption()
  .allowExcessArguments()
  .parse();
const opts = program.opts<{ events: number; batches: number }>();
if (opts.events < opts.batches) program.error('--events must be at least --batches');

const root = resolve(import.meta.dirname, '..');
const child = spawn(
  process.execPath,
  [
    resolve(root, 'node_modules/vitest/vitest.mjs'),
    'run',
    '--project',
    'system',
    'test/integration/erasure-acceptance.test.ts',
    ...program.args,
  ],
  {
    cwd: root,
    stdio: 'inherit',
    env: {
      ...process.env,
      ERASURE_ACCEPTANCE_EVENTS: String(opts.events),
      ERASURE_ACCEPTANCE_BATCHES: String(opts.batches),
    },
  },
);
const stop = (sig: NodeJS.Signals): void => void child.kill(sig);
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
