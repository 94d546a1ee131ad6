/**
 * Output of `query`: an aligned table (default), JSON lines, or CSV (RFC 4180).
 * Values arrive as DuckDB's JSON-safe form (BIGINT, DECIMAL and timestamps as strings).
 */

/** One cell as text; `nullText` is what NULL prints as. */
export function cellText(v: unknown, nullText: string): string {
  if (v === null || v === undefined) return nullText;
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') return String(v);
  return JSON.stringify(v);
}

const NUMERIC_RE = /^-?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?$/i;

/**
 * An aligned text table with a header rule and a row count. Numeric columns are right-aligned;
 * line breaks inside cells are shown as `\n` so every row stays on one line.
 */
export function formatTable(columns: readonly string[], rows: readonly (readonly unknown[])[]): string {
  const text = rows.map((r) => columns.map((_, i) => cellText(r[i], 'NULL').replace(/\r?\n/g, '\\n')));
  const numeric = columns.map(
    (_, i) =>
      rows.length > 0 &&
      rows.every(
        (r) =>
          r[i] === null || typeof r[i] === 'number' || (typeof r[i] === 'string' && NUMERIC_RE.test(r[i] as string)),
      ),
  );
  const widths = columns.map((c, i) => Math.max(c.length, ...text.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[], alignNumbers: boolean): string =>
    cells
      .map((c, i) => (alignNumbers && numeric[i] ? c.padStart(widths[i] ?? 0) : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  const out = [line(columns, false), widths.map((w) => '-'.repeat(w)).join('  '), ...text.map((r) => line(r, true))];
  out.push(`(${rows.length} row${rows.length === 1 ? '' : 's'})`);
  return `${out.join('\n')}\n`;
}

/** One JSON object per row (JSON Lines). */
export function formatJsonLines(columns: readonly string[], rows: readonly (readonly unknown[])[]): string {
  return rows.map((r) => `${JSON.stringify(Object.fromEntries(columns.map((c, i) => [c, r[i] ?? null])))}\n`).join('');
}

function csvField(s: string): string {
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

/** CSV with a header row; NULL is an empty field. */
export function formatCsv(columns: readonly string[], rows: readonly (readonly unknown[])[]): string {
  const lines = [
    columns.map(csvField).join(','),
    ...rows.map((r) => columns.map((_, i) => csvField(cellText(r[i], ''))).join(',')),
  ];
  return `${lines.join('\r\n')}\r\n`;
}
