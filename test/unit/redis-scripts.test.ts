/**
 * The scripts module (shared/redis/scripts.ts) owns every Lua script: each file in
 * shared/redis/scripts/ is one of its commands, and the key count in its name (the count the
 * loader declares) is the count of KEYS its header lists and its body reads; a `-n` script's
 * count is the caller's, and its body reads no fixed key its header does not list.
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
      const declared = keyCountOf(file);
      if (declared === undefined) {
        expect(header).toMatch(/The key count is the caller's/);
        expect(body).toMatch(/#KEYS/);
        expect(highestKey(body)).toBeLessThanOrEqual(highestKey(header));
      } else {
        expect(highestKey(header)).toBe(declared);
        expect(highestKey(body)).toBeLessThanOrEqual(declared);
      }
    },
  );

  it('refuses a file name without its key count', () => {
    expect(() => keyCountOf('mint.lua')).toThrow(/key count/);
    expect(keyCountOf('list_written-4.lua')).toBe(4);
    expect(keyCountOf('mint_batches-n.lua')).toBeUndefined();
  });
});
