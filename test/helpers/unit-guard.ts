/**
 * Setup file of the unit tier (vitest.config.ts): a unit test starts no process and opens no
 * socket, so it needs no service and stays fast. Either one throws here, naming what to do.
 */
import childProcess from 'node:child_process';
import { syncBuiltinESMExports } from 'node:module';
import net from 'node:net';

const refuse = (what: string) => (): never => {
  throw new Error(
    `the unit tier starts no process and opens no socket (${what}); list this test file in vitest.config.ts under another tier`,
  );
};

for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork'] as const) {
  (childProcess as unknown as Record<string, unknown>)[name] = refuse(`child_process.${name}`);
}
net.Socket.prototype.connect = refuse('a socket connect') as typeof net.Socket.prototype.connect;
net.Server.prototype.listen = refuse('a server listen') as typeof net.Server.prototype.listen;
// Named imports (`import { spawn } from 'node:child_process'`) see the replacements too.
syncBuiltinESMExports();
