// One interface to the operations, two implementations: Tauri IPC (the desktop console) and the
// admin HTTP API (the same UI in a browser against `idemgate serve`). The operations' client and
// every type are generated from the Rust declarations (src/bindings); errors are always an
// ErrorBody with a stable code.
import type { ErrorBody } from "./bindings/ErrorBody";
import type { ExportCmd } from "./bindings/ExportCmd";
import type { Code } from "./bindings/Code";
import type { Identity } from "./bindings/Identity";
import type { JobProgress } from "./bindings/JobProgress";
import type { LedgerInfo } from "./bindings/LedgerInfo";
import type { ExportManifest } from "./bindings/ExportManifest";
import type { ExportVerifyReport } from "./bindings/ExportVerifyReport";
import type { Exported } from "./bindings/Exported";
import type { ProxyStatus } from "./bindings/ProxyStatus";
import type { ServerInfo } from "./bindings/ServerInfo";
import { OPS, opsClient, type OpName, type Ops } from "./bindings/ops";

export interface Transport {
  readonly kind: "tauri" | "http";
  /** Every operation, typed (generated from their declarations in crates/ops/src/op). */
  readonly ops: Ops;
  /** Who the admin API knows the caller as, and their role; `null` on the desktop, where the
   * console acts as the OS user on a ledger it opens itself. */
  whoami(): Promise<Identity | null>;
  ledgerInfo(): Promise<LedgerInfo>;
  openLedger(path: string): Promise<LedgerInfo>;
  /** A range of the log (`events`), or the entries created in it with their outcomes, exported:
   * to a file of the desktop, or as the server's export job whose file and manifest the browser
   * then saves. `null` when cancelled. */
  exportFile(what: Exported, cmd: ExportCmd, job: string): Promise<ExportManifest | null>;
  /** An export file chosen in a browser, with its manifest, checked by the server without the
   * ledger (the desktop checks a file of its own by path: `ops.verify_export`). */
  verifyUpload(file: File, manifest: File | null): Promise<ExportVerifyReport>;
  cancelJob(job: string): Promise<boolean>;
  onProgress(f: (p: JobProgress) => void): Promise<() => void>;
  proxyStatus(): Promise<ProxyStatus>;
  proxyStart(config: string): Promise<ProxyStatus>;
  proxyStop(): Promise<ProxyStatus>;
}

export function isErrorBody(e: unknown): e is ErrorBody {
  return typeof e === "object" && e !== null && "code" in e && "message" in e;
}

/** Any thrown value as an ErrorBody. */
export function toErrorBody(e: unknown): ErrorBody {
  if (isErrorBody(e)) return e;
  return { code: "internal", message: e instanceof Error ? e.message : String(e) };
}

type Invoke = (cmd: string, args?: Record<string, unknown>) => Promise<unknown>;
type Listen = (event: string, f: (e: { payload: unknown }) => void) => Promise<() => void>;

/** The desktop console: Tauri IPC. `invoke` and `listen` are injected (tests pass mocks);
 * `operator` reads the name typed in the header, which every call carries: the desktop judges by
 * it (and the OS account) who may decide on a held call. */
export class TauriTransport implements Transport {
  readonly kind = "tauri" as const;
  constructor(
    private readonly invoke: Invoke,
    private readonly listen: Listen,
    private readonly operator: () => string = () => "",
  ) {}

  private async call<T>(cmd: string, args?: Record<string, unknown>): Promise<T> {
    try {
      return (await this.invoke(cmd, args)) as T;
    } catch (e) {
      throw toErrorBody(e);
    }
  }

  /** Every operation through the console's one `call` command; `job` names long work, for its
   * progress events and Cancel. */
  readonly ops: Ops = opsClient((name, args, job) => this.call<unknown>("call", { name, args, job, operator: this.operator().trim() || null }));

  async whoami(): Promise<Identity | null> { return null; }
  ledgerInfo() { return this.call<LedgerInfo>("ledger_info"); }
  openLedger(path: string) { return this.call<LedgerInfo>("open_ledger", { path }); }
  exportFile(what: Exported, cmd: ExportCmd, job: string): Promise<ExportManifest | null> {
    return what === "entries" ? this.ops.export_entries(cmd, job) : this.ops.export(cmd, job);
  }
  async verifyUpload(): Promise<ExportVerifyReport> {
    throw { code: "unsupported", message: "the desktop checks an export file by its path" } satisfies ErrorBody;
  }
  cancelJob(job: string) { return this.call<boolean>("cancel_job", { job }); }
  onProgress(f: (p: JobProgress) => void) { return this.listen("job-progress", (e) => f(e.payload as JobProgress)); }
  proxyStatus() { return this.call<ProxyStatus>("proxy_status"); }
  proxyStart(config: string) { return this.call<ProxyStatus>("proxy_start", { config }); }
  proxyStop() { return this.call<ProxyStatus>("proxy_stop"); }
}

function query(o: Record<string, unknown>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) {
    if (v === null || v === undefined || v === false || v === "") continue;
    p.set(k, String(v));
  }
  const s = p.toString();
  return s ? `?${s}` : "";
}

function unsupported(what: string): never {
  throw { code: "unsupported", message: `${what} is only available in the desktop console` } satisfies ErrorBody;
}

/** The media type of a long work's answer given as it goes: a JSON document a line. */
const NDJSON = "application/x-ndjson";

/** Hands a downloaded file to the browser to save, under `name`. */
export type Save = (name: string, data: Blob) => void;

function saveInBrowser(name: string, data: Blob): void {
  const url = URL.createObjectURL(data);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** The browser console: the admin HTTP API of `idemgate serve`, with its bearer token. */
export class HttpTransport implements Transport {
  readonly kind = "http" as const;
  private readonly listeners = new Set<(p: JobProgress) => void>();
  /** The server's export id of each running console job, so that Cancel can delete it. */
  private readonly exports = new Map<string, string>();
  /** The request of each running single-call job (a verify, a purge; its progress comes as lines
   * of its answer), so that Cancel can drop it: the server stops a verify, or a purge between two
   * chunks, whose client went away. */
  private readonly calls = new Map<string, AbortController>();
  private readonly cancelled = new Set<string>();
  constructor(
    private readonly base: string,
    private readonly token: string,
    private readonly fetchFn: typeof fetch = (...a) => fetch(...a),
    private readonly save: Save = saveInBrowser,
    private readonly pollMs = 250,
  ) {}

  private async send(method: string, path: string, body?: unknown, signal?: AbortSignal, accept?: string): Promise<Response> {
    let r: Response;
    try {
      r = await this.fetchFn(`${this.base}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.token}`,
          // A form sets its own multipart content type, with its boundary.
          ...(body === undefined || body instanceof FormData ? {} : { "content-type": "application/json" }),
          ...(accept === undefined ? {} : { accept }),
        },
        body: body === undefined ? undefined : body instanceof FormData ? body : JSON.stringify(body),
        signal,
      });
    } catch (e) {
      throw { code: "network", message: String(e) } satisfies ErrorBody;
    }
    if (!r.ok) {
      const data = await r.json().catch(() => null);
      // Not problem+json: something between the console and the admin API answered.
      if (typeof data?.code !== "string") throw { code: "network", message: `HTTP ${r.status} ${r.statusText}` } satisfies ErrorBody;
      throw { code: data.code as Code, message: data.detail ?? r.statusText } satisfies ErrorBody;
    }
    return r;
  }

  private async req<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    const r = await this.send(method, path, body, signal);
    return (await r.json().catch(() => null)) as T;
  }

  /** One request as a console job that Cancel can stop: its progress reported as the server
   * sends it, its result at the end; `null` when it was cancelled. */
  private async cancellable<T>(job: string, method: string, path: string, body?: unknown): Promise<T | null> {
    const c = new AbortController();
    this.calls.set(job, c);
    try {
      return await this.lines<T>(job, await this.send(method, path, body, c.signal, NDJSON));
    } catch (e) {
      if (c.signal.aborted) return null;
      throw e;
    } finally {
      this.calls.delete(job);
    }
  }

  /** The result of an answer given as it goes (`application/x-ndjson`: progress lines, then
   * `result` or `problem`), each progress line reported for `job`. An answer of one JSON document
   * (a server that does not stream) is its result. */
  private async lines<T>(job: string, r: Response): Promise<T> {
    if (!(r.headers.get("content-type") ?? "").startsWith(NDJSON) || r.body === null) return (await r.json()) as T;
    const reader = r.body.getReader();
    const text = new TextDecoder();
    let buf = "";
    for (;;) {
      const { done, value } = await reader.read();
      buf += text.decode(value, { stream: !done });
      let end: number;
      while ((end = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, end).trim();
        buf = buf.slice(end + 1);
        if (line === "") continue;
        const m = JSON.parse(line) as { progress?: number; result?: T; problem?: { code?: Code; detail?: string; title?: string } };
        if (m.progress !== undefined) this.progress(job, m.progress);
        else if (m.result !== undefined) return m.result;
        else if (m.problem !== undefined) throw { code: m.problem.code ?? "internal", message: m.problem.detail ?? m.problem.title ?? "" } satisfies ErrorBody;
      }
      if (done) throw { code: "network", message: "the answer ended before its result" } satisfies ErrorBody;
    }
  }

  private progress(job: string, done: number): void {
    for (const f of this.listeners) f({ job, done, total: null });
  }

  /** Every operation through its admin API route: path parameters from the request, the rest
   * as the query (`GET`) or the JSON body; long work as lines a job's Cancel can stop. */
  readonly ops: Ops = opsClient((name, req, job) => this.op(name, req as Record<string, unknown>, job));

  private async op(name: OpName, req: Record<string, unknown>, job: string | null): Promise<unknown> {
    const { http, kind } = OPS[name];
    if (http === null) return unsupported(`${name.replaceAll("_", " ")} (on files of the console's own machine)`);
    const rest = { ...req };
    const path = http.path.replace(/\{(\w+)\}/g, (_, k: string) => {
      const v = rest[k];
      delete rest[k];
      return encodeURIComponent(String(v));
    });
    // GET and DELETE take the request in the query; POST as its JSON body.
    const get = http.method !== "POST";
    const url = get ? `${path}${query(rest)}` : path;
    if (job !== null && (kind === "job" || kind === "upstream_job")) return this.cancellable(job, http.method, url, get ? undefined : rest);
    return this.req(http.method, url, get ? undefined : rest);
  }

  whoami() { return this.req<Identity>("GET", "/admin/v1/whoami"); }
  /** The server's ledger, as `GET /admin/v1/server` names it (the server, and why, when it cannot). */
  async ledgerInfo(): Promise<LedgerInfo> {
    const at = `idemgate serve at ${this.base}`;
    try {
      const s = await this.req<ServerInfo>("GET", "/admin/v1/server");
      return { location: `${s.ledger} (${at})`, error: null };
    } catch (e) {
      return { location: at, error: toErrorBody(e) };
    }
  }
  async openLedger(): Promise<LedgerInfo> { return unsupported("opening another ledger"); }
  /**
   * An export job on the server (the path is the server's to choose, so `cmd.path` is not sent):
   * followed to its end, then its file and manifest are saved as downloads, under the names
   * `idemgate verify --export` expects. `null` when cancelled (the server deletes it).
   */
  async exportFile(what: Exported, cmd: ExportCmd, job: string): Promise<ExportManifest | null> {
    const started = await this.ops.start_export({ what, format: cmd.format, since: cmd.range.since, until: cmd.range.until });
    this.exports.set(job, started.id);
    try {
      let j = started;
      while (j.state === "running") {
        this.progress(job, j.done);
        await new Promise((r) => setTimeout(r, this.pollMs));
        if (this.cancelled.has(job)) return null;
        j = await this.ops.export_job({ id: j.id });
      }
      if (this.cancelled.has(job)) return null;
      if (j.state === "failed" || !j.manifest || !j.file_url || !j.manifest_url) {
        throw j.error ?? ({ code: "export-failed", message: `export ${j.id} ended without a file` } satisfies ErrorBody);
      }
      this.progress(job, j.done);
      const m = j.manifest;
      this.save(m.file, await (await this.send("GET", j.file_url)).blob());
      this.save(`${m.file}.manifest.json`, await (await this.send("GET", j.manifest_url)).blob());
      return m;
    } catch (e) {
      if (this.cancelled.has(job)) return null;
      throw e;
    } finally {
      this.exports.delete(job);
      this.cancelled.delete(job);
    }
  }
  verifyUpload(file: File, manifest: File | null): Promise<ExportVerifyReport> {
    const form = new FormData();
    form.append("file", file, file.name);
    if (manifest) form.append("manifest", manifest, manifest.name);
    return this.req<ExportVerifyReport>("POST", "/admin/v1/verify/export", form);
  }
  /** Cancels an export (deleting it on the server), or a verify or a purge (dropping its request). */
  async cancelJob(job: string) {
    const call = this.calls.get(job);
    if (call !== undefined) {
      call.abort();
      return true;
    }
    const id = this.exports.get(job);
    if (id === undefined) return false;
    this.cancelled.add(job);
    await this.ops.cancel_export({ id }).catch(() => undefined);
    return true;
  }
  async onProgress(f: (p: JobProgress) => void) {
    this.listeners.add(f);
    return () => { this.listeners.delete(f); };
  }
  async proxyStatus(): Promise<ProxyStatus> {
    const s = await this.req<ServerInfo>("GET", "/admin/v1/server");
    return { running: true, config: null, proxy_addr: s.proxy_addr, admin_addr: this.base, error: null };
  }
  async proxyStart(): Promise<ProxyStatus> { return unsupported("starting an embedded proxy"); }
  async proxyStop(): Promise<ProxyStatus> { return unsupported("stopping the proxy"); }
}
