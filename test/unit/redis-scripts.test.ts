/**
 * The scripts module (shared/redis/scripts.ts) owns every Lua script: each file in
 * shared/redis/scripts/ is one of its commands, and the key count in its name (the count the
 * loader declares) is the count of KEYS its header lists and its body reads.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SCRIPT_FILES, type ScriptName, keyCountOf, scriptSource } from '../../shared/redis/scripts.js';

const dir = new URL('../../shared/redis/scripts/', import.meta.url);
const highestKey = (text: string): number =>
  Math.max(0, ...[...text.matchAll(/KEYS\[(\d+)\]/g)].map((m) => Number(m[1])));

describe('shared/redis/scripts', () => {
  it('loads every .lua file of its folder, and nothing else', () => {
    const files = readdirSync(dir)
      .filter((f) => f.endsWith('.lua'))
      .sort();
    expect(Object.values(SCRIPT_FILES).sort()).toEqual(files);
  });

  it.each(Object.entries(SCRIPT_FILES))(
    '%s (%s): header and body name as many KEYS as its file name declares',
    (name, file) => {
      const text = scriptSource(name as ScriptName);
      expect(text).toBe(readFileSync(new URL(file, dir), 'utf8'));
      const [header = '', body = ''] = text.split(/\]\]\n/, 2);
      expect(header.startsWith('--[[')).toBe(true);
      expect(header).toMatch(/Returns/);
      expect(highestKey(header)).toBe(keyCountOf(file));
      expect(highestKey(body)).toBeLessThanOrEqual(keyCountOf(file));
    },
  );

  it('refuses a file name without its key count', () => {
    expect(() => keyCountOf('mint.lua')).toThrow(/key count/);
    expect(keyCountOf('release_batch-7.lua')).toBe(7);
  });
});
