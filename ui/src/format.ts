// Presentation helpers: pure functions, unit-tested.
import type { RequestRecord } from "./bindings/RequestRecord";
import type { ResponseRecord } from "./bindings/ResponseRecord";
import type { SeriesPoint } from "./bindings/SeriesPoint";

/** An entry's route as people read it: `route · tool` for an MCP call. */
export function routeLabel(e: { route: string; tool: string | null }): string {
  return e.tool ? `${e.route} · ${e.tool}` : e.route;
}

export function isoTime(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "—";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

/** "3m ago", "2h 5m", "in 40m": for ages and expiries. */
export function relative(ms: number | null | undefined, now: number): string {
  if (ms === null || ms === undefined) return "—";
  const d = Math.round((ms - now) / 1000);
  const a = Math.abs(d);
  const txt = a < 60 ? `${a}s` : a < 3600 ? `${Math.floor(a / 60)}m` : a < 86400 ? `${Math.floor(a / 3600)}h ${Math.floor((a % 3600) / 60)}m` : `${Math.floor(a / 86400)}d ${Math.floor((a % 86400) / 3600)}h`;
  return d < 0 ? `${txt} ago` : `in ${txt}`;
}

/** How much of a body the Entry view lays out: a stored response may be 16 MiB, too much to
 * parse, pretty-print and lay out whole on a click. The rest is one command away. */
export const SHOWN_BODY = 256 * 1024;

export function bodyText(b: string | { hex: string }, entryId?: number): string {
  if (typeof b !== "string") return `<${b.hex.length / 2} bytes, not UTF-8>`;
  if (b.length > SHOWN_BODY) {
    const whole = entryId === undefined ? "idemgate show ID --json" : `idemgate show ${entryId} --json`;
    return `${b.slice(0, SHOWN_BODY)}\n… and ${(b.length - SHOWN_BODY).toLocaleString("en")} more characters, not shown here (${whole} prints it whole)`;
  }
  try {
    return JSON.stringify(JSON.parse(b), null, 2);
  } catch {
    return b;
  }
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** idemgate's default proxy address, named when the console knows of no proxy running. */
export const DEFAULT_PROXY = "127.0.0.1:8700";

/**
 * The URL base of the proxy listening on `addr` (host:port, as the server reports it), or of
 * idemgate's default when none is known. An address on every interface (0.0.0.0, [::]) is
 * reached by the host the console was loaded from, or loopback.
 */
export function proxyBase(addr: string | null, pageHost: string): { base: string; known: boolean } {
  if (!addr) return { base: `http://${DEFAULT_PROXY}`, known: false };
  const m = /^(\[[^\]]*\]|[^:]+):(\d+)$/.exec(addr);
  if (!m) return { base: `http://${addr}`, known: true };
  const [, host, port] = m;
  const any = host === "0.0.0.0" || host === "[::]";
  return { base: `http://${any ? pageHost || "127.0.0.1" : host}:${port}`, known: true };
}

/** A curl command that re-sends a stored request (secrets were never stored, so none appear). */
export function curlFor(req: RequestRecord, base: string): string {
  const parts = ["curl", "-X", req.method, shellQuote(`${base}${req.path}`)];
  for (const [n, v] of req.headers) parts.push("-H", shellQuote(`${n}: ${v}`));
  const body = typeof req.body === "string" ? req.body : null;
  if (body) parts.push("--data-raw", shellQuote(body));
  return parts.join(" ");
}

export function statusLine(r: ResponseRecord): string {
  return `${r.status} · ${r.headers.map(([n, v]) => `${n}: ${v}`).join(" · ")}`;
}

/** Hourly series for one set of kinds, aligned to `hours` buckets ending at the current hour. */
export function seriesFor(points: SeriesPoint[], kinds: string[], now: number, hours: number): number[] {
  const hour = 3_600_000;
  const last = now - (now % hour);
  const out = new Array<number>(hours).fill(0);
  for (const p of points) {
    if (!kinds.includes(p.kind)) continue;
    const i = hours - 1 - Math.round((last - p.hour) / hour);
    if (i >= 0 && i < hours) out[i] += p.count;
  }
  return out;
}

/** An SVG polyline's points for a series in a w×h box: each value at the middle of its column
 * (the w/n wide band a chart's hover gives it), 0 at the bottom and the series' top at the top. */
export function sparkPoints(values: number[], w: number, h: number): string {
  const max = Math.max(1, ...values);
  const step = w / Math.max(1, values.length);
  return values.map((v, i) => `${((i + 0.5) * step).toFixed(1)},${(h - (v / max) * (h - 2) - 1).toFixed(1)}`).join(" ");
}

export function fromLocalInput(v: string): number | null {
  if (!v) return null;
  const t = new Date(v).getTime();
  return Number.isNaN(t) ? null : t;
}
