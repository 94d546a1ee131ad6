/**
 * `npm run rollup-acceptance -- [--seconds 40] [--period 10] [--delay 2] [vitest args…]`: the rollup
 * acceptance tests (test/integration/rollup-acceptance*.test.ts), acceptance 1 and 6 in the issue's
 * own form: 40 s of pushes with ROLLUP_PERIOD_SECONDS=10 and ROLLUP_DELAY_SECONDS=2. `npm test`
 * runs the same assertions in a shorter form (12 s, 4 s periods, 1 s delay).
 * Extra arguments go to vitest, e.g. `-t "acceptance 6"` for the S3 one alone.
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
  .name('rollup-acceptance')
  .description('Run the rollup acceptance tests in their long form')
  .option('--seconds <n>', 'seconds of continuous pushes (acceptance 1 and 6)', int(10, 3600), 40)
  .option('--period <n>', 'ROLLUP_PERIOD_SECONDS (must divide 86400)', int(1, 86_400), 10)
  .option('--delay <n>', 'ROLLUP_DELAY_SECONDS', int(0, 3600), 2)
  .allowUnknownOption()
  .allowExcessArguments()
  .parse();
const opts = program.opts<{ seconds: number; period: number; delay: number }>();
if (86_400 % opts.period !== 0) program.error('--period must divide 86400');

const root = resolve(import.meta.dirname, '..');
const child = spawn(
  process.execPath,
  [
    resolve(root, 'node_modules/vitest/vitest.mjs'),
    'run',
    'test/integration/rollup-acceptance.test.ts',
    'test/integration/rollup-acceptance-faults.test.ts',
    ...program.args,
  ],
  {
    cwd: root,
    stdio: 'inherit',
    env: {
      ...process.env,
      ROLLUP_ACCEPTANCE_SECONDS: String(opts.seconds),
      ROLLUP_ACCEPTANCE_PERIOD_SECONDS: String(opts.period),
      ROLLUP_ACCEPTANCE_DELAY_SECONDS: String(opts.delay),
    },
  },
);
const stop = (sig: NodeJS.Signals): void => void child.kill(sig);
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
