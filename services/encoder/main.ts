import { parseEnv } from '../../shared/config.js';
import { exitOnStartupError, handleShutdown } from '../../shared/runtime.js';
import { startStack } from '../stack.js';

/** `npm run start:encoder`: one encoder process (run any number against the same Redis and store). */
try {
  const stack = await startStack(parseEnv(), { api: false, encoder: true });
  handleShutdown(stack.logger, [() => stack.close()]);
} catch (err) {
  exitOnStartupError(err);
}
