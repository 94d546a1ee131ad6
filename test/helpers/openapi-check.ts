/**
 * Checks an HTTP answer of the product against its OpenAPI document: the path (templating
 * matched against the document's paths) and method are listed, the status is one the operation
 * lists, its required headers are there and valid, and its body fits the schema of its media
 * type (ajv, JSON Schema 2020-12). A path no route serves may only answer 404 `not_found`; a method
 * a path does not serve only 405 `method_not_allowed` with Allow.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import type { OpenApiDocument } from '../../services/api/contract/document.js';

/** One answer as a test received it. */
export interface SeenAnswer {
  method: string;
  /** The request path, with or without a query. */
  path: string;
  status: number;
  headers: Headers | Record<string, string | string[] | undefined>;
  /** The body as text ('' when none). */
  body: string;
}

interface ResponseObject {
  headers?: Record<string, { required?: boolean; schema: object }>;
  content?: Record<string, { schema: object }>;
}
type Operation = { responses: Record<string, ResponseObject> };

/** Builds a checker for one document; `check` returns the problems (empty: the answer is described). */
export function answerChecker(doc: OpenApiDocument): { check(a: SeenAnswer): string[]; seen: Set<string> } {
  const ajv = new Ajv2020({ strict: false, allErrors: false });
  const compiled = new Map<string, ValidateFunction>();
  const validator = (schema: object): ValidateFunction => {
    const key = JSON.stringify(schema);
    let v = compiled.get(key);
    if (!v) compiled.set(key, (v = ajv.compile(schema)));
    return v;
  };
  const templates = Object.keys(doc.paths).map((p) => ({
    p,
    re: new RegExp(`^${p.replace(/[.]/g, '\\.').replace(/\{[^}]+\}/g, '[^/]+')}$`),
    literal: p.replace(/\{[^}]+\}/g, '').length,
  }));
  /** Which (path, method, status) the checks saw, for coverage. */
  const seen = new Set<string>();

  const headerOf = (h: SeenAnswer['headers'], name: string): string | undefined => {
    if (h instanceof Headers) return h.get(name) ?? undefined;
    const v = h[name.toLowerCase()];
    return Array.isArray(v) ? v.join(', ') : v;
  };

  function checkResponse(where: string, r: ResponseObject, a: SeenAnswer): string[] {
    const problems: string[] = [];
    for (const [name, h] of Object.entries(r.headers ?? {})) {
      const value = headerOf(a.headers, name);
      if (value === undefined) {
        if (h.required) problems.push(`${where}: header ${name} missing`);
      } else if (!validator(h.schema)(value))
        problems.push(`${where}: header ${name}=${value} does not fit its schema`);
    }
    const head = a.method.toUpperCase() === 'HEAD';
    if (head || a.status === 304) return problems;
    if (!r.content) {
      if (a.body !== '') problems.push(`${where}: a body where the document has none`);
      return problems;
    }
    const type = (headerOf(a.headers, 'content-type') ?? '').split(';')[0]?.trim() ?? '';
    const media = r.content[type];
    if (!media)
      return [
        ...problems,
        `${where}: content type ${type || '(none)'} not listed (${Object.keys(r.content).join(', ')})`,
      ];
    if (!type.endsWith('json')) return problems;
    let value: unknown;
    try {
      value = JSON.parse(a.body);
    } catch {
      return [...problems, `${where}: body is not JSON`];
    }
    const v = validator(media.schema);
    if (!v(value)) problems.push(`${where}: body ${a.body.slice(0, 200)} does not fit: ${ajv.errorsText(v.errors)}`);
    return problems;
  }

  function check(a: SeenAnswer): string[] {
    const path = a.path.split('?')[0] ?? '';
    const method = a.method.toLowerCase();
    const where = `${a.method} ${path} ${a.status}`;
    const match = templates.filter((t) => t.re.test(path)).sort((x, y) => y.literal - x.literal)[0];
    if (!match) {
      // A path no route serves: the app's 404 (the document's info says so).
      if (a.status !== 404) return [`${where}: path not in the document`];
      seen.add(`(unlisted path) ${a.status}`);
      return method === 'head' ? [] : checkNotFound(where, a);
    }
    const item = doc.paths[match.p] as Record<string, Operation>;
    const op = item[method];
    if (!op) {
      // A method the path does not serve: 405 as every operation of the path lists it.
      const any = Object.values(item).find((o) => o.responses['405']);
      if (a.status !== 405 || !any) return [`${where}: method not in the document`];
      seen.add(`${match.p} ${method} 405`);
      return checkResponse(where, any.responses['405'] as ResponseObject, a);
    }
    const r = op.responses[String(a.status)];
    if (!r) return [`${where}: status not listed for ${method} ${match.p} (${Object.keys(op.responses).join(', ')})`];
    seen.add(`${match.p} ${method} ${a.status}`);
    return checkResponse(where, r, a);
  }

  function checkNotFound(where: string, a: SeenAnswer): string[] {
    try {
      const b = JSON.parse(a.body) as { error?: unknown; code?: unknown };
      return typeof b.error === 'string' && b.code === 'not_found' ? [] : [`${where}: not a not_found error body`];
    } catch {
      return [`${where}: body is not JSON`];
    }
  }

  return { check, seen };
}
