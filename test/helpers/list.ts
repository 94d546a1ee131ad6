/**
 * Every name `GET /list/<collection>/<app>` returns, paged with `?after=` (1,000 a page, at most
 * 100 pages), without the `.parquet` suffix: the batch ids in the order the API lists them.
 */
export async function listAllIds(base: string, app: string, token: string, collection = 'events'): Promise<string[]> {
  const out: string[] = [];
  let after: string | undefined;
  for (let page = 0; page < 100; page++) {
    const q = new URLSearchParams({ limit: '1000' });
    if (after !== undefined) q.set('after', after);
    const r = await fetch(`${base}/list/${collection}/${app}?${q.toString()}`, {
      headers: { Authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(10_000),
    });
    if (r.status !== 200) throw new Error(`list ${app}: ${r.status}`);
    const body = (await r.json()) as { items: string[]; hasMore: boolean };
    out.push(...body.items.map((n) => n.replace(/\.parquet$/, '')));
    after = out[out.length - 1];
    if (!body.hasMore) break;
  }
  return out;
}
