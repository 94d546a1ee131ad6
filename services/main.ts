import { parseEnv } from '../shared/config.js';
import { exitOnStartupError, handleShutdown } from '../shared/runtime.js';
import { startStack } from './stack.js';

/** `npm start`: API and encoder in one process, with a private Redis when none is configured. */
try {
  const stack = await startStack(parseEnv(), { api: true, encoder: true, embeddedRedis: true });
  handleShutdown(stack.logger, [() => stack.close()]);
} catch (err) {
  exitOnStartupError(err);
}
