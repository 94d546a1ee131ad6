/**
 * `npm run iceberg-acceptance -- [--seconds 40] [--rgw-seconds 40] [--period 10] [vitest args…]`:
 * the Iceberg acceptance tests (test/integration/iceberg-acceptance.test.ts), issue 35's
 * acceptance 1-4 in their own form: clients push to three apps for 40 s with 2 s commits and 10 s
 * rollup periods, an independent reader (icebird) samples each app's current snapshot every
 * second, the committer is `kill -9`ed three times (two of them mid-commit), every metadata version
 * is checked against its through-batch-id; on the filesystem store, then on Ceph RGW. Prints a
 * progress line per second and one line of figures per store. `npm test` runs the same assertions
 * in a shorter form (4 s periods; 12 s and three kills on the filesystem store, 8 s and one
 * mid-commit kill on RGW). Pushes go on past the given seconds until the kills are done and every
 * table committed after the last restart (a killed holder's prefix lock blocks its table for 10 s).
 * Extra arguments go to vitest, e.g. `-t "RGW"` for the RGW run alone.
 */
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';

const int =
  (min: number, max: number) =>
  (raw: string): number => {
    const n = Number(raw);
    if (!/^\d{1,6}$/.test(raw) || n < min || n > max)
      throw new InvalidArgumentError(`must be an integer from ${min} to ${max}`);
    return n;
  };

const program = new Command()
  .name('iceberg-acceptance')
  .description('Run the Iceberg acceptance tests in their long form')
  .option('--seconds <n>', 'seconds of continuous pushes on the filesystem store', int(8, 3600), 40)
  .option('--rgw-seconds <n>', 'seconds of continuous pushes on Ceph RGW', int(8, 3600), 40)
  .option('--period <n>', 'ROLLUP_PERIOD_SECONDS (must divide 3600)', int(1, 3600), 10)
  .allowUnknownOption()
  .allowExcessArguments()
  .parse();
const opts = program.opts<{ seconds: number; rgwSeconds: number; period: number }>();
if (3600 % opts.period !== 0) program.error('--period must divide 3600 (the table is partitioned by hour)');

const root = resolve(import.meta.dirname, '..');
const child = spawn(
  process.execPath,
  [
    resolve(root, 'node_modules/vitest/vitest.mjs'),
    'run',
    '--project',
    'system',
    'test/integration/iceberg-acceptance.test.ts',
    ...program.args,
  ],
  {
    cwd: root,
    stdio: 'inherit',
    env: {
      ...process.env,
      ICEBERG_ACCEPTANCE_SECONDS: String(opts.seconds),
      ICEBERG_ACCEPTANCE_RGW_SECONDS: String(opts.rgwSeconds),
      ICEBERG_ACCEPTANCE_PERIOD_SECONDS: String(opts.period),
      ICEBERG_ACCEPTANCE_RGW_KILLS: '3',
      // One store after the other: the reader's round of reads (icebird decodes every row) fits in its second.
      ICEBERG_ACCEPTANCE_CONCURRENT: '0',
    },
  },
);
const stop = (sig: NodeJS.Signals): void => void child.kill(sig);
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
