import { existsSync, readdirSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SYSTEM, UNIT_NOT_UNIT } from '../../vitest.config.js';

const ROOT = resolve(import.meta.dirname, '../..');

function testFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.test.ts'))
    .map((e) => relative(ROOT, join(e.parentPath, e.name)));
}

describe('test tiers (vitest.config.ts)', () => {
  it('every test file runs in exactly one tier: each lives under test/unit or test/integration, and the lists name existing files of the right folder', () => {
    const all = testFiles('test');
    expect(all.filter((f) => !f.startsWith('test/unit/') && !f.startsWith('test/integration/'))).toEqual([]);
    for (const f of [...SYSTEM, ...UNIT_NOT_UNIT]) expect(existsSync(join(ROOT, f)), f).toBe(true);
    expect(SYSTEM.filter((f) => !f.startsWith('test/integration/'))).toEqual([]);
    expect(UNIT_NOT_UNIT.filter((f) => !f.startsWith('test/unit/'))).toEqual([]);
    expect(new Set(SYSTEM).size).toBe(SYSTEM.length);
  });

  it('the unit tier refuses child processes and sockets', async () => {
    const { execFileSync, spawn } = await import('node:child_process');
    const net = await import('node:net');
    expect(() => spawn(process.execPath, ['-v'])).toThrow(/unit tier starts no process/);
    expect(() => execFileSync(process.execPath, ['-v'])).toThrow(/unit tier starts no process/);
    expect(() => net.connect(1, '127.0.0.1')).toThrow(/opens no socket/);
    expect(() => net.createServer().listen(0, '127.0.0.1')).toThrow(/opens no socket/);
    await expect(fetch('http://127.0.0.1:1/')).rejects.toThrow();
  });
});
