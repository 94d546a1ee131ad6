import { ReplyError } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { commandNeverRan } from '../../shared/redis/connection.js';

const errno = (message: string, code: string): Error => Object.assign(new Error(message), { code });

describe('commandNeverRan: may a failed write be undone?', () => {
  it('yes when the command never left the process', () => {
    expect(commandNeverRan(new Error("Stream isn't writeable and enableOfflineQueue options is false"))).toBe(true);
    expect(commandNeverRan(new Error("Cluster isn't ready and enableOfflineQueue options is false"))).toBe(true);
    expect(commandNeverRan(errno('connect ECONNREFUSED 127.0.0.1:6379', 'ECONNREFUSED'))).toBe(true);
  });

  it('yes when Redis refused it before running it', () => {
    expect(commandNeverRan(new ReplyError("OOM command not allowed when used memory > 'maxmemory'."))).toBe(true);
    expect(commandNeverRan(new ReplyError("READONLY You can't write against a read only replica."))).toBe(true);
    expect(commandNeverRan(new ReplyError('CLUSTERDOWN The cluster is down'))).toBe(true);
    expect(commandNeverRan(new ReplyError('BUSY Redis is busy running a script.'))).toBe(true);
  });

  it('no when it may have run: timeouts, a connection lost after the write, script errors, anything else', () => {
    expect(commandNeverRan(new Error('Command timed out'))).toBe(false);
    expect(commandNeverRan(new Error('enqueue timed out after 3000 ms'))).toBe(false);
    expect(commandNeverRan(new Error('Connection is closed.'))).toBe(false);
    expect(commandNeverRan(errno('read ECONNRESET', 'ECONNRESET'))).toBe(false);
    expect(
      commandNeverRan(new ReplyError('ERR user_script:12: Script attempted to access nonexistent global variable')),
    ).toBe(false);
    expect(
      commandNeverRan(
        Object.assign(new Error('Reached the max retries per request limit (which is 1).'), {
          name: 'MaxRetriesPerRequestError',
        }),
      ),
    ).toBe(false);
    // Redis' words inside a message that is not its reply prove nothing.
    expect(commandNeverRan(new Error('OOM command not allowed'))).toBe(false);
    expect(commandNeverRan('OOM')).toBe(false);
  });
});
