/**
 * Every relative link in README.md and docs/**\/*.md resolves: the file it names exists and its
 * `#anchor`, if any, is a heading of that file under GitHub's slug rules. File reads only.
 */
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');

/** README.md and every Markdown file under docs/, as absolute paths. */
function markdownFiles(): string[] {
  const docs = readdirSync(join(ROOT, 'docs'), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.md'))
    .map((e) => join(e.parentPath, e.name));
  return [join(ROOT, 'README.md'), ...docs];
}

/** Text outside fenced code blocks and inline code: links inside code are not links. */
function prose(markdown: string): string {
  return markdown.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
}

/**
 * GitHub's heading anchor: lower case, punctuation dropped (letters, digits, spaces, '-' and '_'
 * stay), each space a '-'. A repeated heading gets `-1`, `-2`, … in order.
 */
function slugsOf(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const slugs = new Set<string>();
  const body = markdown.replace(/^```[\s\S]*?^```/gm, '');
  for (const m of body.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const text = (m[1] as string).replace(/\[([^\]]*)\]\([^)]*\)/g, '$1');
    const base = text
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    slugs.add(n === 0 ? base : `${base}-${n}`);
  }
  return slugs;
}

/** The relative link targets of a Markdown file: `[text](target)`, without web or mail links. */
function linksOf(markdown: string): string[] {
  return [...prose(markdown).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)]
    .map((m) => m[1] as string)
    .filter((t) => !/^[a-z][a-z0-9+.-]*:/i.test(t));
}

/** Why a link from `from` does not resolve, or null when it does. */
function brokenReason(from: string, target: string): string | null {
  const [path = '', anchor] = target.split('#', 2);
  const file = path === '' ? from : resolve(dirname(from), decodeURIComponent(path));
  if (!existsSync(file)) return 'no such file';
  if (anchor === undefined) return null;
  if (statSync(file).isDirectory() || !file.endsWith('.md')) return 'anchor on a file that is not Markdown';
  return slugsOf(readFileSync(file, 'utf8')).has(decodeURIComponent(anchor)) ? null : `no heading #${anchor}`;
}

describe('doc links', () => {
  it('the slug rule: lower case, punctuation dropped, spaces to dashes, repeats numbered', () => {
    const slugs = slugsOf(
      '# The `?after=` promise\n## What is tested, and what is not\n## Setup\n## Setup\n```sh\n# not a heading\n```\n',
    );
    expect([...slugs]).toEqual(['the-after-promise', 'what-is-tested-and-what-is-not', 'setup', 'setup-1']);
  });

  it('every relative link in README.md and docs/ names a file that exists and, with #anchor, one of its headings', () => {
    const broken: string[] = [];
    let checked = 0;
    for (const file of markdownFiles()) {
      for (const target of linksOf(readFileSync(file, 'utf8'))) {
        checked++;
        const why = brokenReason(file, target);
        if (why) broken.push(`${relative(ROOT, file)}: (${target}) ${why}`);
      }
    }
    expect(broken).toEqual([]);
    // The README alone links to every docs page; a parser that found nothing would pass above.
    expect(checked).toBeGreaterThan(50);
  });
});
