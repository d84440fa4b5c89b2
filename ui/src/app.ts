// The console: views over the operations, and the operator actions. Every decision (what is
// stuck, what may be resolved, what a purge touches) is made by the operations behind the
// transport; this file shows their answers and asks the operator for a reason.
import type { Code } from "./bindings/Code";
import type { EntryFilter } from "./bindings/EntryFilter";
import type { EntrySummary } from "./bindings/EntrySummary";
import type { EntryView } from "./bindings/EntryView";
import type { ErrorBody } from "./bindings/ErrorBody";
import type { Event } from "./bindings/Event";
import type { EventKind } from "./bindings/EventKind";
import type { LogRequest } from "./bindings/LogRequest";
import type { Manifest } from "./bindings/Manifest";
import type { Preview } from "./bindings/Preview";
import type { BulkCmd } from "./bindings/BulkCmd";
import type { BulkKind } from "./bindings/BulkKind";
import type { BulkTarget } from "./bindings/BulkTarget";
import type { ResolveAs } from "./bindings/ResolveAs";
import type { Identity } from "./bindings/Identity";
import type { Incident } from "./bindings/Incident";
import { allows, COMMANDS, type CommandName } from "./bindings/commands";
import { clear, h, svg } from "./dom";
import { bodyText, curlFor, DEFAULT_PROXY, fromLocalInput, isoTime, proxyBase, relative, seriesFor, sparkPoints, routeLabel } from "./format";
import { toErrorBody, type Transport } from "./transport";
import { archivePanel, retentionPanel, type RunJob } from "./audit";
import { VirtualList } from "./vlist";

export type View = "overview" | "log" | "stuck" | "collisions" | "expiries" | "incidents" | "export" | "entry" | "search";

const NAV: [View, string, string][] = [
  ["overview", "Overview", "1"],
  ["log", "Log", "2"],
  ["stuck", "Stuck", "3"],
  ["collisions", "Collisions", "4"],
  ["expiries", "Expiries", "5"],
  ["incidents", "Incidents", "6"],
  ["export", "Export", "7"],
];

const ROW = 30;
const PAGE = 200;

/** Where the console keeps its preferences (localStorage in the app; a Map in tests). */
export interface Prefs {
  getItem(k: string): string | null;
  setItem(k: string, v: string): void;
}

interface ActionSpec {
  title: string;
  preview: Preview;
  /** Extra inputs (e.g. resolve's outcome fields). */
  fields?: HTMLElement;
  /** Runs the action; `progress(done, total)`; stops early once `stop` is aborted (the dialog's
   * Stop): a loop checks `stop.aborted`, one long call listens for its `abort`. Returns a summary. */
  run: (operator: string, reason: string, progress: (done: number, total: number) => void, stop: AbortSignal) => Promise<string>;
}

export class App {
  view: View = "overview";
  private main!: HTMLElement;
  private banner!: HTMLElement;
  private ledgerLabel!: HTMLElement;
  private list: VirtualList<EntrySummary> | VirtualList<Event> | null = null;
  private timers: number[] = [];
  private lastEntry: number | null = null;
  private searchTerm = "";
  /** The archive directory the Export view opens with: the retention policy's, or the last one used. */
  private archiveDir: string | null = null;
  /** The signed-in operator in a browser; `null` on the desktop, where every action is offered. */
  private who: Identity | null = null;
  private operatorSlot!: HTMLElement;

  constructor(
    private readonly root: HTMLElement,
    readonly t: Transport,
    private readonly prefs: Prefs,
  ) {}

  get operator(): string {
    return this.named() ? (this.who?.name ?? "") : (this.prefs.getItem("operator") ?? "");
  }

  /** Whether the credential names the operator (a browser signed in with an operator's token):
   * then actions are recorded under that name, and none is typed. */
  private named(): boolean {
    return this.who !== null && !this.who.shared;
  }

  /** Whether the signed-in role may run `cmd` (the command table's rule; the server checks it
   * again). Everything on the desktop. */
  can(cmd: CommandName): boolean {
    return this.who === null || allows(this.who.role, cmd);
  }

  /** Attributes of a button for `cmd`: disabled, and saying why, when the role may not run it. */
  private gate(cmd: CommandName, enabled = true): Record<string, string | boolean> {
    if (!this.can(cmd)) return { disabled: true, title: `needs the ${COMMANDS[cmd].role} role; you are signed in as ${this.who?.role ?? ""}` };
    return { disabled: !enabled };
  }

  async start(): Promise<void> {
    const dark = this.prefs.getItem("theme") ?? (window.matchMedia?.("(prefers-color-scheme: dark)").matches ? "dark" : "light");
    document.body.classList.toggle("dark", dark === "dark");
    this.shell();
    document.addEventListener("keydown", (e) => this.key(e));
    this.who = await this.t.whoami().catch((e) => (this.error(e), null));
    this.showWho();
    const info = await this.t.ledgerInfo();
    this.showLedger(info.location, info.error);
    await this.go("overview");
  }

  // ---- chrome ---------------------------------------------------------------------------------

  private shell(): void {
    clear(this.root);
    this.operatorSlot = h("span", { class: "who-slot" });
    this.showWho();
    const ledgerPath = h("input", { testid: "ledger-input", attrs: { placeholder: "open another ledger: /path/to/ledger.db or postgres://…", list: "recent-ledgers", "aria-label": "ledger path or URL" } });
    const recent = h("datalist", { attrs: { id: "recent-ledgers" } }, ...this.recent().map((p) => h("option", { attrs: { value: p } })));
    const open = h("button", { testid: "ledger-open", on: { click: () => void this.openLedger(ledgerPath.value.trim()) } }, "Open");
    const theme = h("button", { testid: "theme-toggle", title: "dark / light", on: { click: () => this.toggleTheme() } }, "◐");
    this.ledgerLabel = h("span", { class: "ledger", testid: "ledger-label" });
    const search = h("input", { testid: "search-input", class: "search", attrs: { placeholder: "search: cus_123, customer:cus_123, a key…", "aria-label": "search entries by a subject or a key" }, on: { change: (e) => { const v = (e.target as HTMLInputElement).value.trim(); if (v) { this.searchTerm = v; void this.go("search"); } } } });
    const nav = h(
      "nav",
      null,
      ...NAV.map(([v, label, k]) =>
        h("button", { testid: `nav-${v}`, class: "nav", title: `${label} (${k})`, on: { click: () => void this.go(v) } }, label),
      ),
    );
    this.banner = h("div", { class: "banner hidden", testid: "error-banner", attrs: { role: "alert" } });
    this.main = h("main", { testid: "main" });
    this.root.append(
      // In a browser the ledger is the server's: no other can be opened from here.
      h("header", null, h("strong", { class: "brand" }, "idemgate"), this.ledgerLabel, search, h("span", { class: "grow" }), ...(this.t.kind === "tauri" ? [ledgerPath, recent, open] : []), this.operatorSlot, theme),
      h("div", { class: "body" }, nav, h("section", { class: "content" }, this.banner, this.main)),
    );
  }

  /** The header's operator: who is signed in (a browser), or the name to record, typed. */
  private showWho(): void {
    if (!this.operatorSlot) return;
    clear(this.operatorSlot);
    if (this.who) this.operatorSlot.append(h("span", { class: "signed-in", testid: "signed-in" }, this.who.shared ? "shared admin token" : `${this.who.name} · ${this.who.role}`));
    if (this.named()) return;
    this.operatorSlot.append(h("input", {
      testid: "operator-input",
      attrs: { placeholder: "your name (for the log)", value: this.operator, "aria-label": "operator name" },
      on: { change: (e) => this.prefs.setItem("operator", (e.target as HTMLInputElement).value.trim()) },
    }));
  }

  private recent(): string[] {
    try {
      return JSON.parse(this.prefs.getItem("recent") ?? "[]") as string[];
    } catch {
      return [];
    }
  }

  private showLedger(location: string | null, error: ErrorBody | null): void {
    this.ledgerLabel.textContent = location ? `ledger: ${location}` : "no ledger open";
    if (location) this.prefs.setItem("recent", JSON.stringify([location, ...this.recent().filter((p) => p !== location)].slice(0, 8)));
    if (error) this.error(error);
  }

  private async openLedger(path: string): Promise<void> {
    if (!path) return;
    try {
      const info = await this.t.openLedger(path);
      // A failed open keeps the ledger that was open (the command says which) and shows why.
      this.showLedger(info.location, info.error);
      if (!info.error) await this.go(this.view === "entry" ? "overview" : this.view);
    } catch (e) {
      this.error(e);
    }
  }

  private toggleTheme(): void {
    const dark = !document.body.classList.contains("dark");
    document.body.classList.toggle("dark", dark);
    this.prefs.setItem("theme", dark ? "dark" : "light");
  }

  error(e: unknown): void {
    const b = toErrorBody(e);
    clear(this.banner);
    this.banner.append(h("code", null, b.code), " ", b.message, h("button", { class: "link", on: { click: () => this.banner.classList.add("hidden") } }, "dismiss"));
    this.banner.classList.remove("hidden");
  }

  private key(e: KeyboardEvent): void {
    const target = e.target as HTMLElement;
    if (target.closest("input, textarea, select, dialog")) {
      if (e.key === "Escape") (target as HTMLInputElement).blur();
      return;
    }
    const nav = NAV.find(([, , k]) => k === e.key);
    if (nav) void this.go(nav[0]);
    else if (e.key === "j" || e.key === "ArrowDown") this.list?.move(1);
    else if (e.key === "k" || e.key === "ArrowUp") this.list?.move(-1);
    else if (e.key === "Enter") {
      const cur = this.list?.current() as EntrySummary | Event | undefined;
      const id = cur && ("seq" in cur ? cur.entry_id : cur.id);
      if (id) void this.go("entry", id);
    } else if (e.key === "/") {
      (this.main.querySelector("[data-testid=filter-input]") as HTMLInputElement | null)?.focus();
      e.preventDefault();
    } else if (e.key === "Escape" && this.view === "entry") void this.go("stuck");
    else return;
    e.preventDefault();
  }

  async go(view: View, entryId?: number): Promise<void> {
    this.timers.forEach((t) => clearInterval(t));
    this.timers = [];
    this.view = view;
    this.list = null;
    for (const b of this.root.querySelectorAll("nav button")) b.classList.toggle("active", (b as HTMLElement).dataset.testid === `nav-${view}`);
    clear(this.main);
    this.main.dataset.view = view;
    try {
      switch (view) {
        case "overview": return await this.overview();
        case "log": return await this.log();
        case "stuck": return await this.entryList("Stuck", "PENDING past its lease, or with an unknown outcome: held for you, never re-run automatically.", { stuck: true }, ["resolve", "release", "replay", "reconcile"]);
        case "collisions": return await this.entryList("Collisions", "Keys that arrived again with a different request (422 key-reuse). Open one for the field-level diff.", { collisions: true }, []);
        case "expiries": return await this.expiries();
        case "incidents": return await this.incidents();
        case "export": return this.exportView();
        case "entry": return await this.entry(entryId ?? this.lastEntry ?? 0);
        case "search": return await this.entryList(`Search · ${this.searchTerm}`, "Every entry whose subject (a customer, an order) or key is this, newest first; duplicate suspects are marked.", searchFilter(this.searchTerm), []);
      }
    } catch (e) {
      this.error(e);
    }
  }

  // ---- overview -------------------------------------------------------------------------------

  private async overview(): Promise<void> {
    const hours = 72;
    const s = await this.t.ops.stats({ hours });
    const now = Date.now();
    const stat = (label: string, value: number | string, testid?: string, go?: View) =>
      h("div", { class: `stat${go ? " clickable" : ""}`, testid, on: go ? { click: () => void this.go(go) } : undefined }, h("div", { class: "value" }, value), h("div", { class: "label" }, label));
    const byState = Object.fromEntries(s.entries_by_state.map(([k, v]) => [k, v]));
    this.main.append(
      h("h1", null, "Overview"),
      h(
        "div",
        { class: "stats" },
        stat("stuck", s.stuck, "stat-stuck", "stuck"),
        stat("collisions", s.collisions, "stat-collisions", "collisions"),
        stat("duplicate suspects", s.duplicate_suspects, "stat-duplicates", "incidents"),
        stat("expired", s.expired, "stat-expired", "expiries"),
        stat("completed", byState.completed ?? 0),
        stat("pending", byState.pending ?? 0),
        stat("released", byState.released ?? 0),
        stat("failed", byState.failed ?? 0),
        stat("log head", s.head ? `#${s.head.seq}` : "—"),
      ),
    );
    const charts: [string, string[]][] = [
      ["executions", ["complete"]],
      ["replays absorbed", ["replay_absorbed"]],
      ["collisions", ["collision"]],
      ["stuck (lease passed or unknown)", ["lease_expired", "outcome_unknown"]],
      ["expiries", ["expired"]],
    ];
    const grid = h("div", { class: "charts" });
    for (const [label, kinds] of charts) {
      const values = seriesFor(s.series, kinds, now, hours);
      const total = values.reduce((a, b) => a + b, 0);
      grid.append(
        h(
          "figure",
          { class: "chart", testid: `chart-${kinds[0]}` },
          h("figcaption", null, `${label} · ${total} in ${hours}h`),
          svg("svg", { viewBox: "0 0 300 60", preserveAspectRatio: "none", role: "img" }, svg("polyline", { points: sparkPoints(values, 300, 60), fill: "none", class: "line" })),
        ),
      );
    }
    const retention = await this.t.ops.retention_status({}).catch(() => null);
    this.archiveDir ??= retention?.archive_dir ?? null;
    // The embedded proxy is the desktop console's; a browser talks to a running `idemgate serve`.
    this.main.append(grid, retentionPanel(retention, now), ...(this.t.kind === "tauri" ? [await this.proxyPanel()] : []));
  }

  private async proxyPanel(): Promise<HTMLElement> {
    const box = h("div", { class: "panel", testid: "proxy-panel" });
    const render = async () => {
      const st = await this.t.proxyStatus().catch((e) => (this.error(e), null));
      clear(box);
      const cfg = h("input", { testid: "proxy-config", attrs: { placeholder: "/path/to/idemgate.toml", value: st?.config ?? this.prefs.getItem("proxyConfig") ?? "" } });
      const status = st?.running ? `running · proxy ${st.proxy_addr} · admin ${st.admin_addr ?? "off"}` : st?.error ? `stopped: ${st.error}` : "stopped";
      box.append(
        h("h2", null, "Embedded proxy"),
        h("div", { class: `proxy-status ${st?.running ? "ok" : ""}`, testid: "proxy-status" }, status),
        h(
          "div",
          { class: "row" },
          cfg,
          st?.running
            ? h("button", { testid: "proxy-stop", on: { click: async () => { await this.t.proxyStop().catch((e) => this.error(e)); await render(); } } }, "Stop")
            : h("button", { testid: "proxy-start", on: { click: async () => { this.prefs.setItem("proxyConfig", cfg.value); await this.t.proxyStart(cfg.value.trim()).catch((e) => this.error(e)); await render(); } } }, "Start"),
        ),
      );
    };
    await render();
    return box;
  }

  // ---- log ------------------------------------------------------------------------------------

  private async log(): Promise<void> {
    const f: LogRequest = { entry_id: null, route: null, scope: null, key: null, kind: null, operator: null, since: null, until: null, search: null };
    const input = (field: keyof LogRequest, placeholder: string, testid?: string) =>
      h("input", { testid, attrs: { placeholder, "aria-label": placeholder }, on: { change: (e) => { const v = (e.target as HTMLInputElement).value.trim(); (f as Record<string, unknown>)[field] = v === "" ? null : v; void list.reset(); } } });
    const time = (field: "since" | "until", label: string) =>
      h("label", null, label, h("input", { testid: `log-${field}`, attrs: { type: "datetime-local" }, on: { change: (e) => { f[field] = fromLocalInput((e.target as HTMLInputElement).value); void list.reset(); } } }));
    const kinds = ["", "claim", "attempt", "complete", "outcome_unknown", "release", "collision", "duplicate_suspect", "lease_expired", "expired", "resolve", "replay", "reconcile", "purge"];
    const kind = h("select", { testid: "log-kind", on: { change: (e) => { const v = (e.target as HTMLSelectElement).value; f.kind = (v || null) as EventKind | null; void list.reset(); } } }, ...kinds.map((k) => h("option", { attrs: { value: k } }, k || "any kind")));
    const live = h("input", { testid: "log-live", attrs: { type: "checkbox", checked: true } });
    const list = new VirtualList<Event>(
      ROW,
      (ev, _i, sel) =>
        h(
          "div",
          { class: `row event${sel ? " selected" : ""}`, testid: "entry-row", attrs: { "data-entry-id": ev.entry_id ?? "", "data-seq": ev.seq }, on: { click: () => ev.entry_id && void this.go("entry", ev.entry_id) } },
          h("span", { class: "seq" }, `#${ev.seq}`),
          h("span", { class: "time" }, isoTime(ev.at)),
          h("span", { class: `kind k-${ev.kind}` }, ev.kind),
          h("span", { class: "route" }, `${ev.route}${ev.scope ? ` · ${ev.scope}` : ""}`),
          h("span", { class: "key" }, ev.key),
          h("span", { class: "who" }, ev.operator ? `${ev.operator}: ${ev.reason ?? ""}` : ev.detail),
        ),
      async (last) => {
        const p = await this.t.ops.log({ ...f, before: last ? last.seq : null, limit: PAGE });
        return { items: p.events, more: p.next_before !== null };
      },
      "log-list",
    );
    this.list = list;
    this.main.append(
      h("h1", null, "Log"),
      h("p", { class: "hint" }, "The append-only, hash-chained event stream, newest first. Filters apply on Enter; / focuses search; j/k and Enter open an entry."),
      h("div", { class: "filters" }, input("search", "search key, route, reason…", "filter-input"), input("route", "route"), input("scope", "scope"), input("key", "key"), kind, input("operator", "operator", "log-operator"), time("since", "since"), time("until", "until"), h("label", null, live, "live")),
      list.el,
    );
    await list.reset();
    this.timers.push(
      window.setInterval(async () => {
        if (!live.checked || this.view !== "log") return;
        const head = list.items[0]?.seq ?? 0;
        const page = await this.t.ops.log({ ...f, limit: PAGE }).catch(() => null);
        if (page) list.prepend(page.events.filter((e) => e.seq > head));
      }, 2000),
    );
  }

  // ---- entry lists ----------------------------------------------------------------------------

  private entryRow(e: EntrySummary, selected: boolean, sel: Set<number> | null): HTMLElement {
    const now = Date.now();
    const check = sel
      ? h("input", { testid: "row-select", attrs: { type: "checkbox", checked: sel.has(e.id), "aria-label": `select ${e.key}` }, on: { click: (ev) => { ev.stopPropagation(); if ((ev.target as HTMLInputElement).checked) sel.add(e.id); else sel.delete(e.id); } } })
      : null;
    return h(
      "div",
      { class: `row entry${selected ? " selected" : ""}`, testid: "entry-row", attrs: { "data-entry-id": e.id }, on: { click: () => void this.go("entry", e.id) } },
      check,
      h("span", { class: "id" }, `${e.id}`),
      h("span", { class: `state s-${e.state}${e.stuck ? " stuck" : ""}` }, e.stuck ? "stuck" : e.state),
      h("span", { class: "route" }, `${routeLabel(e)}${e.effect === "destructive" ? " ⚠" : ""}`),
      h("span", { class: "scope" }, e.scope || "—"),
      h("span", { class: "key" }, e.key),
      h("span", { class: "subjects", testid: "row-subjects" }, subjectsText(e.subjects)),
      h("span", { class: "age", title: isoTime(e.created_at) }, relative(e.created_at, now)),
      h("span", { class: "num", title: "attempts" }, `${e.attempts}×`),
      h("span", { class: e.duplicate_of !== null ? "err dup" : "err", testid: e.duplicate_of !== null ? "row-duplicate" : "row-note" }, e.duplicate_of !== null ? `⚠ duplicate of #${e.duplicate_of}` : e.expires_at && this.view === "expiries" ? `expires ${relative(e.expires_at, now)}` : e.last_error ?? (e.collisions ? `${e.collisions} collision(s)` : "")),
    );
  }

  private async entryList(title: string, hint: string, base: Partial<EntryFilter>, bulk: ("resolve" | "release" | "replay" | "reconcile")[]): Promise<void> {
    const filter: EntryFilter = { state: null, stuck: false, collisions: false, expired: false, expiring_within: null, duplicates: false, route: null, scope: null, key: null, tool: null, subject: null, search: null, ...base };
    const sel = new Set<number>();
    const list = new VirtualList<EntrySummary>(ROW, (e, _i, s) => this.entryRow(e, s, bulk.length ? sel : null), async (last) => this.entryPage(filter, last), `${this.view}-list`);
    this.list = list;
    const search = h("input", { testid: "filter-input", attrs: { placeholder: "filter: a key or a customer's id, or route:, scope:, tool:, customer: … (exact)" }, on: { change: (e) => { Object.assign(filter, searchFilter((e.target as HTMLInputElement).value)); sel.clear(); void list.reset(); } } });
    const bar = h("div", { class: "filters" }, search);
    for (const a of bulk) {
      bar.append(h("button", { testid: `bulk-${a}`, attrs: this.gate("bulk"), on: { click: () => void this.bulk(a, filter, sel, list) } }, `${a[0].toUpperCase()}${a.slice(1)} selected (or all matching)`));
    }
    this.main.append(h("h1", null, title), h("p", { class: "hint" }, hint), bar, list.el);
    await list.reset();
  }

  private async entryPage(filter: EntryFilter, last: EntrySummary | undefined): Promise<{ items: EntrySummary[]; more: boolean }> {
    const { expiring_within, ...rest } = filter;
    const p = await this.t.ops.entries({ ...rest, expiring_within_ms: expiring_within, before: last ? last.id : null, limit: PAGE });
    return { items: p.entries, more: p.next_before !== null };
  }

  private async bulk(action: "resolve" | "release" | "replay" | "reconcile", filter: EntryFilter, sel: Set<number>, list: VirtualList<EntrySummary>): Promise<void> {
    try {
      // Which entries, how many and whether any is destructive: the operations layer decides.
      const kind: BulkKind = action === "release" ? "resolve" : action;
      const target: BulkTarget = { filter, ids: sel.size ? [...sel] : null };
      const preview = await this.t.ops.preview_bulk({ action: kind, target });
      const outcome = action === "resolve" ? this.resolveFields() : null;
      await this.action({
        title: `${action} ${preview.count} entr${preview.count === 1 ? "y" : "ies"}`,
        preview: { ...preview, action },
        fields: outcome?.el,
        run: async (operator, reason, progress, stop) => {
          const o = action === "release" ? { as: "released" as ResolveAs, external_ref: null, body: null, status: 0 } : outcome?.value();
          const cmd: BulkCmd = {
            action: kind, target, operator, reason, confirm_destructive: preview.destructive,
            as: o?.as ?? null,
            response: o?.body ? { status: o.status, headers: [], body: o.body } : null,
            external_ref: o?.external_ref ?? null,
          };
          return this.runJob("bulk", preview.count, progress, stop, (job) => this.t.ops.bulk(cmd, job), {
            stopped: "what was done stays done (the log lists it); the rest are as they were",
            done: (r) => {
              const failures = r.failures.slice(0, 5).map((f) => `${f.id}: ${f.message}`).join("; ");
              return `${r.succeeded} of ${r.total} done${r.cancelled ? " (cancelled)" : ""}${r.failed ? `; ${r.failed} failed: ${failures}` : ""}`;
            },
          });
        },
      });
      sel.clear();
      await list.reset();
    } catch (e) {
      this.error(e);
    }
  }

  /**
   * Runs one server-side job for the action dialog: its progress reported against `count`, the
   * dialog's Stop cancelling it, and a summary of its report, or of what was heard before Stop
   * when the report is lost with the request (a browser drops it).
   */
  private async runJob<T>(kind: string, count: number, progress: (done: number, total: number) => void, stop: AbortSignal, call: (job: string) => Promise<T | null>, say: { stopped: string; done: (r: T) => string }): Promise<string> {
    const job = `${kind}-${Date.now()}`;
    let heard = 0;
    const unlisten = await this.t.onProgress((p) => { if (p.job === job) { heard = p.done; progress(p.done, count); } });
    stop.addEventListener("abort", () => void this.t.cancelJob(job));
    try {
      const r = await call(job);
      // What was last heard may be passed by a chunk or an entry that ended as Stop came.
      if (r === null) return `stopped${heard > 0 ? ` after at least ${heard} of ${count}` : ""}: ${say.stopped}`;
      return say.done(r);
    } finally {
      unlisten();
    }
  }

  private async perform(action: string, id: number, operator: string, reason: string, confirm: boolean, outcome?: { as: ResolveAs; external_ref: string | null; body: string | null; status: number }): Promise<void> {
    const cmd = { operator, reason, confirm_destructive: confirm };
    if (action === "release") {
      await this.t.ops.resolve({ entry_id: id, as: "released", response: null, external_ref: null, ...cmd });
    } else if (action === "resolve") {
      const o = outcome ?? { as: "completed" as ResolveAs, external_ref: null, body: null, status: 200 };
      // The content type is ops's to choose (JSON when the body is, else plain text).
      const response = o.body ? { status: o.status, headers: [] as [string, string][], body: o.body } : null;
      await this.t.ops.resolve({ entry_id: id, as: o.as, response, external_ref: o.external_ref, ...cmd });
    } else if (action === "replay") {
      const r = await this.t.ops.replay({ entry_id: id, ...cmd });
      if (r.problem) throw { code: ((r.problem as Record<string, unknown>).code ?? "upstream-error") as Code, message: String((r.problem as Record<string, unknown>).detail ?? "") } satisfies ErrorBody;
    } else if (action === "reconcile") {
      await this.t.ops.reconcile({ entry_id: id, ...cmd });
    } else if (action === "purge") {
      await this.t.ops.purge({ target: "ids", ids: [id], ...cmd }, `purge-${id}-${Date.now()}`);
    }
  }

  /** The inputs of a resolve: as what, with which response or external reference. */
  private resolveFields(): { el: HTMLElement; value: () => { as: ResolveAs; external_ref: string | null; body: string | null; status: number } } {
    // A failed entry's response carries the upstream's error (400-599), which is not guessed: the
    // status empties when "failed" is chosen over a success status.
    const asChanged = (): void => {
      const failed = as.value === "failed";
      status.min = failed ? "400" : "200";
      status.placeholder = failed ? "400-599" : "";
      if (failed && Number(status.value) < 400) status.value = "";
      if (!failed && !status.value) status.value = "200";
    };
    const as = h("select", { testid: "resolve-as", on: { change: asChanged } }, h("option", { attrs: { value: "completed" } }, "completed — it happened"), h("option", { attrs: { value: "failed" } }, "failed — permanent failure"), h("option", { attrs: { value: "released" } }, "released — it did not happen; may run again"));
    const ext = h("input", { testid: "external-ref-input", attrs: { placeholder: "external reference (e.g. ch_123 found upstream)" } });
    const status = h("input", { testid: "response-status", attrs: { type: "number", value: 200, min: 200, max: 599 } });
    const body = h("textarea", { testid: "response-body", attrs: { rows: 3, placeholder: "response body retries will get (optional if an external reference is given)" } });
    return {
      el: h("div", { class: "fields" }, h("label", null, "Outcome ", as), ext, h("label", null, "Status ", status), body),
      value: () => ({ as: as.value as ResolveAs, external_ref: ext.value.trim() || null, body: body.value.trim() || null, status: Number(status.value) || (as.value === "failed" ? 0 : 200) }),
    };
  }

  private async expiries(): Promise<void> {
    const base: EntryFilter = { state: null, stuck: false, collisions: false, expired: true, expiring_within: null, duplicates: false, route: null, scope: null, key: null, tool: null, subject: null, search: null };
    let filter = { ...base };
    const list = new VirtualList<EntrySummary>(ROW, (e, _i, s) => this.entryRow(e, s, null), async (last) => this.entryPage(filter, last), "expiries-list");
    this.list = list;
    const mode = h("select", { testid: "expiry-mode", on: { change: (e) => { const soon = (e.target as HTMLSelectElement).value === "soon"; filter = { ...filter, expired: !soon, expiring_within: soon ? 3_600_000 : null }; void list.reset(); } } }, h("option", { attrs: { value: "expired" } }, "expired"), h("option", { attrs: { value: "soon" } }, "expiring within 1h"));
    const search = h("input", { testid: "filter-input", attrs: { placeholder: "route (exact), e.g. charges" }, on: { change: (e) => { filter = { ...filter, route: (e.target as HTMLInputElement).value.trim() || null }; void list.reset(); } } });
    const purgeAll = h("button", {
      testid: "action-purge",
      attrs: this.gate("purge"),
      on: {
        click: async () => {
          if (!filter.expired) return this.error({ code: "invalid-argument", message: "only expired entries are purged; switch to 'expired'" });
          const target = { target: "expired" as const, filter: { ...filter, expired: true } };
          const preview = await this.t.ops.preview_purge(target).catch((e) => (this.error(e), null));
          if (!preview) return;
          await this.action({
            title: "Purge every expired entry matching the filter",
            preview,
            run: (operator, reason, progress, stop) =>
              this.runJob("purge", preview.count, progress, stop, (job) => this.t.ops.purge({ ...target, operator, reason, confirm_destructive: preview.destructive }, job), {
                stopped: "the entries purged before Stop stay purged (the log lists them); the rest are as they were",
                done: (r) => `purged ${r.purged.length} entr${r.purged.length === 1 ? "y" : "ies"}${r.cancelled ? ` of ${preview.count}: stopped; the rest are as they were` : ""}`,
              }),
          });
          await list.reset();
        },
      },
    }, "Purge all matching");
    this.main.append(h("h1", null, "Expiries"), h("p", { class: "hint" }, "Completed, released or failed entries past their TTL are no longer replayed; their keys may run again. Purging removes their stored requests and responses — the log keeps their events."), h("div", { class: "filters" }, mode, search, purgeAll), list.el);
    await list.reset();
  }

  private async incidents(): Promise<void> {
    const [groups, loops] = await Promise.all([
      this.t.ops.incidents({ limit: 100 }),
      this.t.ops.log({ kind: "loop_suspect", limit: 50 }),
    ]);
    let openOnly = this.prefs.getItem("incidentsOpenOnly") === "1";
    const list = h("div", { testid: "incident-list" });
    const draw = () => {
      clear(list);
      const shown = groups.filter((g) => g.open || !openOnly);
      if (!shown.length) list.append(h("div", { class: "empty" }, openOnly && groups.length ? "Every incident is reviewed." : "No duplicate suspects."));
      for (const g of shown) list.append(this.incidentPanel(g));
    };
    const toggle = h("label", { class: "toggle" }, h("input", { testid: "incidents-open-only", attrs: { type: "checkbox", checked: openOnly }, on: { change: (e) => { openOnly = (e.target as HTMLInputElement).checked; this.prefs.setItem("incidentsOpenOnly", openOnly ? "1" : "0"); draw(); } } }), " open only");
    this.main.append(
      h("h1", null, "Incidents"),
      h("p", { class: "hint" }, "Duplicate suspects: the same effect (the same request, or the route's duplicate_on values such as customer, amount and currency) completed under different keys within the window — a customer charged twice. Newest first; mark one reviewed once you have dealt with it."),
      h("div", { class: "filters" }, toggle),
      list,
    );
    draw();
    this.main.append(h("h2", null, "Loop suspects"), h("p", { class: "hint" }, "An agent sent one request more often than its route's loop_guard allows."));
    if (!loops.events.length) this.main.append(h("div", { class: "empty" }, "No loop suspects."));
    else this.main.append(h("div", { class: "timeline", testid: "loop-suspects" }, ...loops.events.map((ev) => h("div", { class: "row event" }, h("span", { class: "time" }, isoTime(ev.at)), h("span", { class: "route" }, `${ev.route} · ${ev.scope || "no scope"}`), h("span", { class: "who" }, loopText(ev.detail))))));
  }

  /** One incident: what it is about in the business's terms, its entries, its review. */
  private incidentPanel(g: Incident): HTMLElement {
    const review = h("button", { testid: "incident-review", attrs: this.gate("review_incident"), on: { click: () => void this.reviewIncident(g) } }, g.review && !g.open ? "Reviewed ✓" : "Mark reviewed…");
    return h(
      "div",
      { class: `panel incident${g.open ? "" : " reviewed"}`, testid: "incident", attrs: { "data-incident-id": g.id } },
      h("div", { class: "entry-head" }, h("h2", { testid: "incident-title" }, incidentTitle(g)), h("div", { class: "actions" }, review)),
      g.first_purged ? h("p", { class: "small", testid: "incident-first-purged" }, `first entry #${g.id} purged; its duplicates below still happened`) : null,
      g.review ? h("p", { class: "small", testid: "incident-reviewed" }, `${g.open ? "reviewed before its newest suspect" : "reviewed"} by ${g.review.operator}: ${g.review.reason} (${isoTime(g.review.at)})`) : null,
      ...g.entries.map((e) => this.entryRow(e, false, null)),
    );
  }

  private async reviewIncident(g: Incident): Promise<void> {
    await this.action({
      title: `review incident ${g.id}`,
      preview: { action: "review", count: 1, ids: [g.id], keys: [incidentTitle(g)], destructive: false, skipped: [] },
      run: async (operator, reason) => {
        await this.t.ops.review_incident({ entry_id: g.id, operator, reason });
        return "review: done";
      },
    });
    await this.go("incidents");
  }

  // ---- one entry ------------------------------------------------------------------------------

  private async entry(id: number): Promise<void> {
    this.lastEntry = id;
    const v: EntryView = await this.t.ops.show({ entry_id: id });
    const e = v.entry;
    const now = Date.now();
    const kv = (k: string, val: string | number | null | undefined) => h("div", { class: "kv" }, h("span", null, k), h("span", { class: "mono" }, val === null || val === undefined || val === "" ? "—" : String(val)));
    const act = (name: "resolve" | "release" | "replay" | "reconcile" | "purge", label: string, enabled: boolean) =>
      h("button", { testid: `action-${name}`, attrs: this.gate(name === "release" ? "resolve" : name, enabled), on: { click: () => void this.entryAction(name, e.id) } }, label);
    const resolvable = (e.state === "pending" && e.stuck) || e.state === "released" || e.state === "failed";
    const header = h(
      "div",
      { class: "entry-head" },
      h("h1", null, h("span", { class: `state s-${e.state}${e.stuck ? " stuck" : ""}` }, e.stuck ? "stuck" : e.state), ` ${routeLabel(e)} · ${e.key}`),
      h(
        "div",
        { class: "actions" },
        act("resolve", "Resolve…", resolvable),
        act("release", "Release…", resolvable && e.state !== "released"),
        act("replay", "Replay upstream…", resolvable),
        act("reconcile", "Reconcile…", e.stuck),
        act("purge", "Purge…", e.state !== "pending"),
      ),
    );
    const facts = h(
      "div",
      { class: "facts" },
      kv("entry", e.id), kv("scope", e.scope), kv("subjects", subjectsText(e.subjects, "=")), kv("effect", e.effect), kv("attempts", e.attempts), kv("replays", e.replays),
      kv("created", `${isoTime(e.created_at)} (${relative(e.created_at, now)})`), kv("updated", isoTime(e.updated_at)),
      kv("expires", e.expires_at ? `${isoTime(e.expires_at)} (${relative(e.expires_at, now)})` : null),
      kv("lease", e.lease_expires_at ? `${e.lease_owner ?? "—"} until ${isoTime(e.lease_expires_at)}` : null),
      kv("last error", e.last_error), kv("duplicate of", e.duplicate_of), kv("fingerprint", e.fingerprint),
      kv("resolved by", e.resolved_by ? `${e.resolved_by}: ${e.resolution_reason ?? ""}` : null), kv("external ref", e.external_ref),
    );
    this.main.append(header, facts);
    if (v.call) {
      const c = v.call;
      const result = c.error ? `error ${JSON.stringify(c.error)}` : `${c.is_error ? "isError · " : ""}${c.result_text ?? "—"}`;
      this.main.append(
        h("h2", null, `Call · ${c.label}`),
        h("div", { class: "facts", testid: "tool-call" }, kv("arguments", JSON.stringify(c.arguments)), kv("result", result), kv("structured", c.structured === null ? null : JSON.stringify(c.structured))),
      );
    }
    if (e.request) {
      // Through the proxy this console runs or is served by; else idemgate's default address.
      const st = await this.t.proxyStatus().catch(() => null);
      const proxy = proxyBase(st?.running ? st.proxy_addr : null, location.hostname);
      const curl = curlFor(e.request, proxy.base);
      const copied = h("span", { class: "hint", testid: "curl-hint" }, proxy.known ? "" : ` ${DEFAULT_PROXY} is idemgate's default address: no proxy is running in this console`);
      this.main.append(
        h("h2", null, `Request · ${e.request.method} ${e.request.path}`),
        h("pre", { testid: "request-body" }, e.request.headers.map(([n, val]) => `${n}: ${val}`).join("\n"), "\n\n", bodyText(e.request.body, e.id)),
        h("div", { class: "row" }, h("button", { testid: "copy-curl", on: { click: async () => { await navigator.clipboard?.writeText(curl).catch(() => {}); copied.textContent = " copied"; } } }, "Copy as curl"), copied),
        h("pre", { class: "small", testid: "curl" }, curl),
      );
    }
    if (e.response) {
      this.main.append(h("h2", null, `Response · ${e.response.status}`), h("pre", { testid: "response" }, e.response.headers.map(([n, val]) => `${n}: ${val}`).join("\n"), "\n\n", bodyText(e.response.body, e.id)));
    }
    e.collision_requests.forEach((c, i) => {
      const diff = v.collision_diffs[i] ?? [];
      this.main.append(
        h("h2", null, `Rejected request (key reuse) · ${isoTime(c.at)}`),
        h(
          "table",
          { class: "diff", testid: "collision-diff" },
          h("thead", null, h("tr", null, h("th", null, "field"), h("th", null, "stored (executed)"), h("th", null, "rejected"))),
          h("tbody", null, ...diff.map((d) => h("tr", null, h("td", { class: "mono" }, d.field), h("td", { class: `mono ${d.stored === null ? "missing" : "old"}` }, d.stored ?? "(absent)"), h("td", { class: `mono ${d.rejected === null ? "missing" : "new"}` }, d.rejected ?? "(absent)")))),
        ),
      );
    });
    this.main.append(
      h("h2", null, "Timeline"),
      h("div", { class: "timeline", testid: "timeline" }, ...v.timeline.map((ev) => h("div", { class: "row event" }, h("span", { class: "seq" }, `#${ev.seq}`), h("span", { class: "time" }, isoTime(ev.at)), h("span", { class: `kind k-${ev.kind}` }, ev.kind), h("span", { class: "who" }, ev.operator ? `${ev.operator}: ${ev.reason ?? ""}` : ev.detail)))),
    );
  }

  private async entryAction(name: string, id: number): Promise<void> {
    try {
      const preview = name === "purge" ? await this.t.ops.preview_purge({ target: "ids", ids: [id] }) : await this.t.ops.preview_resolve({ entry_id: id });
      const fields = name === "resolve" ? this.resolveFields() : null;
      await this.action({
        title: `${name} entry ${id}`,
        preview: { ...preview, action: name },
        fields: fields?.el,
        run: async (operator, reason) => {
          await this.perform(name, id, operator, reason, preview.destructive, fields?.value());
          return `${name}: done`;
        },
      });
      if (name === "purge") await this.go("expiries");
      else await this.go("entry", id);
    } catch (e) {
      this.error(e);
    }
  }

  /**
   * The action dialog: what it will touch (count and keys), a reason, the operator's name, a second
   * confirmation on destructive routes, progress and cancel while it runs, and the outcome.
   */
  action(spec: ActionSpec): Promise<void> {
    return new Promise((resolve) => {
      const p = spec.preview;
      const dlg = h("div", { class: "dialog", testid: "action-dialog", attrs: { role: "dialog", "aria-modal": "true" } });
      const reason = h("textarea", { testid: "reason-input", attrs: { rows: 2, placeholder: "reason (required; recorded in the log)" } });
      // Signed in with an operator's token, the name is the token's: shown, not typed.
      const operator = h("input", { testid: "dialog-operator", attrs: { value: this.operator, placeholder: "your name", readonly: this.named() } });
      const msg = h("div", { class: "dialog-msg", testid: "dialog-message" });
      const bar = h("progress", { attrs: { max: 1, value: 0 } });
      const stop = new AbortController();
      let armed = 0;
      const close = () => {
        overlay.remove();
        resolve();
      };
      // One listener, whose action changes as the dialog does: Cancel, then Stop (which keeps the
      // dialog open for the summary), then Close.
      let onCancel = close;
      const cancel = h("button", { testid: "cancel-button", on: { click: () => onCancel() } }, "Cancel");
      const confirm = h("button", {
        class: p.destructive ? "danger" : "primary",
        testid: "confirm-button",
        attrs: { disabled: p.count === 0 },
        on: {
          click: async () => {
            const r = reason.value.trim();
            const op = operator.value.trim();
            if (!op) return (msg.textContent = "Your name is required: it is recorded with the action.");
            if (!r) return (msg.textContent = "A reason is required: it is recorded with the action.");
            if (p.destructive && armed === 0) {
              armed = 1;
              confirm.textContent = `Confirm again: ${p.count} on a DESTRUCTIVE route`;
              msg.textContent = "This touches a destructive route. Check the keys above, then confirm a second time.";
              return;
            }
            if (!this.named()) this.prefs.setItem("operator", op);
            confirm.setAttribute("disabled", "");
            cancel.textContent = "Stop";
            onCancel = () => stop.abort();
            dlg.append(bar);
            try {
              const summary = await spec.run(op, r, (d, t) => { bar.max = t; bar.value = d; }, stop.signal);
              msg.textContent = summary;
              msg.classList.add("ok");
            } catch (e) {
              const b = toErrorBody(e);
              msg.textContent = `${b.code}: ${b.message}`;
              msg.classList.add("bad");
            }
            cancel.textContent = "Close";
            onCancel = close;
          },
        },
      }, p.count === 0 ? "Nothing to do" : `Confirm ${spec.preview.action} (${p.count})`);
      dlg.append(
        ...[
        h("h2", null, spec.title),
        h("p", null, `This will touch ${p.count} entr${p.count === 1 ? "y" : "ies"}:`),
        h("ul", { class: "keys", testid: "preview-keys" }, ...p.keys.slice(0, 20).map((k, i) => h("li", { class: "mono" }, `${p.ids[i]} · ${k}`)), p.keys.length > 20 ? h("li", null, `… and ${p.keys.length - 20} more`) : null),
        ...p.skipped.map(([id, why]) => h("p", { class: "hint" }, `skipped ${id}: ${why}`)),
        p.destructive ? h("p", { class: "warn" }, "⚠ Destructive route: this needs two confirmations.") : null,
        spec.fields ?? null,
        h("label", null, "Operator ", operator),
        reason,
        msg,
        h("div", { class: "row end" }, cancel, confirm),
        ].filter((x): x is HTMLElement => x !== null),
      );
      const overlay = h("div", { class: "overlay" }, dlg);
      document.body.append(overlay);
      reason.focus();
    });
  }

  // ---- export ---------------------------------------------------------------------------------

  private exportView(): void {
    const format = h("select", { testid: "export-format" }, h("option", { attrs: { value: "ndjson" } }, "NDJSON"), h("option", { attrs: { value: "csv" } }, "CSV"));
    const since = h("input", { testid: "export-since", attrs: { type: "datetime-local" } });
    const until = h("input", { testid: "export-until", attrs: { type: "datetime-local" } });
    const path = h("input", { testid: "export-path", attrs: { placeholder: "/path/to/audit.ndjson", value: this.prefs.getItem("exportPath") ?? "" } });
    const overwrite = h("input", { testid: "export-overwrite", attrs: { type: "checkbox" } }) as HTMLInputElement;
    const out = h("pre", { testid: "export-result", class: "small" });
    const vpath = h("input", { testid: "verify-path", attrs: { placeholder: "/path/to/audit.ndjson (its .manifest.json is checked too)" } });
    const vout = h("pre", { testid: "verify-result", class: "small" });
    const against = h("input", { testid: "against-file", attrs: { type: "file", accept: ".json,application/json" } }) as HTMLInputElement;
    const what = h("select", { testid: "export-what" }, h("option", { attrs: { value: "events" } }, "the log"), h("option", { attrs: { value: "entries" } }, "entries with outcomes"));
    const job: RunJob = async (label, outEl, f, show) => {
      const id = `${label}-${Date.now()}`;
      const bar = h("progress", { testid: "job-progress" });
      const stop = h("button", { testid: "job-cancel", on: { click: () => void this.t.cancelJob(id) } }, "Cancel");
      const status = h("span", { class: "hint" });
      clear(outEl);
      outEl.append(bar, stop, status);
      const unlisten = await this.t.onProgress((p) => { if (p.job === id) status.textContent = ` ${p.done} ${what.value === "entries" && label === "export" ? "entries" : "events"}`; });
      try {
        const r = await f(id);
        clear(outEl);
        if (r !== null && show) outEl.append(show(r));
        else outEl.textContent = r === null ? (label === "export" ? "cancelled: nothing was written" : "cancelled") : JSON.stringify(r, null, 2);
      } catch (e) {
        clear(outEl);
        const b = toErrorBody(e);
        outEl.textContent = `${b.code}: ${b.message}`;
      } finally {
        unlisten();
      }
    };
    // In a browser the export is made on the server and downloaded: no path here, and no file
    // here to verify (`idemgate verify --export FILE` does, beside its saved manifest).
    const local = this.t.kind === "tauri";
    // The head to note now and check later: the log must still hold it, and only have grown.
    const head = h("p", { class: "hint", testid: "log-head" });
    void this.t.ops.head({}).then((at) => { head.textContent = at ? `The log's head now: #${at.seq} ${at.hash}` : "The log is empty."; }, (e) => this.error(e));
    this.main.append(
      h("h1", null, "Export"),
      h("p", { class: "hint" }, local
        ? "A contiguous run of the log as NDJSON or CSV, with FILE.manifest.json recording the count, the chain head and the file's sha256 — for compliance. Verify recomputes the chain and checks the manifest."
        : "A contiguous run of the log as NDJSON or CSV, made on the server and downloaded with FILE.manifest.json (the count, the chain head and the file's sha256) — for compliance. Keep both in one folder: idemgate verify --export FILE checks them."),
      h("div", { class: "panel" }, h("div", { class: "filters" }, ...(local ? [what] : []), format, h("label", null, "since ", since), h("label", null, "until ", until), ...(local ? [path, h("label", { attrs: { title: "An existing file is refused: an earlier export is evidence. Tick this to replace it and its manifest." } }, overwrite, " Replace an existing file")] : []),
        h("button", { testid: "action-export", class: "primary", attrs: this.gate("export"), on: { click: () => { if (local) this.prefs.setItem("exportPath", path.value); const cmd = { format: format.value as "ndjson" | "csv", range: { since: fromLocalInput(since.value), until: fromLocalInput(until.value) }, path: local ? path.value.trim() : "", overwrite: local && overwrite.checked }; void job("export", out, (id) => (local && what.value === "entries" ? this.t.ops.export_entries(cmd, id) : this.t.exportLog(cmd, id))); } } }, "Export")), out),
      h("div", { class: "panel" }, h("div", { class: "filters" }, ...(local ? [vpath,
        h("button", { testid: "action-verify", on: { click: () => void job("verify", vout, (id) => this.t.ops.verify_export({ path: vpath.value.trim() }, id)) } }, "Verify file")] : [h("label", null, "manifest ", against)]),
        h("button", { testid: "action-verify-against", attrs: { title: "Does this ledger still hold the heads the export's manifest recorded? (a cut-off tail of the log shows here)", ...this.gate("verify_against") }, on: { click: () => void job("verify-against", vout, (id) => local ? this.t.ops.verify_against({ path: manifestOf(vpath.value.trim()) }, id) : readManifest(against).then((m) => this.t.ops.verify_against_manifest(m, id))) } }, "Check against the ledger"),
        h("button", { testid: "action-verify-ledger", attrs: this.gate("verify_ledger"), on: { click: () => void job("verify-ledger", vout, (id) => this.t.ops.verify_ledger({}, id)) } }, "Verify the ledger")), head, vout),
      ...(local ? [archivePanel(this.t, this.archiveDir ?? this.prefs.getItem("archiveDir") ?? "", job, (d) => { this.archiveDir = d; this.prefs.setItem("archiveDir", d); })] : []),
    );
  }
}

/** The manifest of an export named by its path, or the manifest itself. */
/** The entry filter a search term asks for: `route:`, `scope:`, `tool:` or `key:` a value, any
 * other `name:value` a subject, and a bare term a key or a subject's value. */
export function searchFilter(term: string): Pick<EntryFilter, "route" | "scope" | "tool" | "key" | "subject" | "search"> {
  const f = { route: null, scope: null, tool: null, key: null, subject: null, search: null } as Pick<EntryFilter, "route" | "scope" | "tool" | "key" | "subject" | "search">;
  const v = term.trim();
  const m = /^([A-Za-z0-9_-]+):(.+)$/.exec(v);
  if (!m) {
    if (v) f.search = v;
    return f;
  }
  const [, name, value] = m;
  if (name === "route" || name === "scope" || name === "tool" || name === "key") f[name] = value;
  else f.subject = `${name}=${value}`;
  return f;
}

/** Subjects as a row shows them (values) or the entry view (`name=value`). */
export function subjectsText(s: [string, string][], sep?: string): string {
  return s.map(([n, v]) => (sep ? `${n}${sep}${v}` : v)).join(" · ");
}

/** An incident's title in the business's terms: "cus_123 · charges · 2 × 49.99 USD · agents
 * billing-01, billing-02 · 14 s apart". */
export function incidentTitle(g: Incident): string {
  const get = (n: string) => g.subjects.find(([k]) => k === n)?.[1];
  const amount = get("amount");
  const currency = get("currency");
  const who = g.subjects.filter(([k]) => k !== "amount" && k !== "currency" && k !== "agent").map(([, v]) => v)[0] ?? `${g.fingerprint.slice(0, 12)}…`;
  const agents = [...new Set(g.entries.map((e) => e.scope).filter((s) => s))];
  const times = g.entries.map((e) => e.created_at);
  const apart = times.length > 1 ? Math.max(...times) - Math.min(...times) : 0;
  const parts = [who, g.route, `${g.entries.length} ×${amount ? ` ${amount}${currency ? ` ${currency.toUpperCase()}` : ""}` : ""}`];
  if (agents.length) parts.push(`${agents.length > 1 ? "agents" : "agent"} ${agents.join(", ")}`);
  if (times.length > 1) parts.push(`${duration(apart)} apart`);
  return parts.join(" · ");
}

function duration(ms: number): string {
  const s = Math.round(ms / 1000);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

/** A loop suspect's detail (its event's JSON), in words. */
function loopText(detail: string): string {
  try {
    const d = JSON.parse(detail) as { calls?: number; max?: number; window_ms?: number; action?: string; tool?: string | null };
    return `${d.calls ?? "?"} calls in ${Math.round((d.window_ms ?? 0) / 1000)} s (max ${d.max ?? "?"})${d.tool ? ` · tool ${d.tool}` : ""} · ${d.action === "reject" ? "refused" : "flagged"}`;
  } catch {
    return detail;
  }
}

export function manifestOf(path: string): string {
  return path.endsWith(".manifest.json") ? path : `${path}.manifest.json`;
}

/** The manifest in a file input, parsed; an ErrorBody when there is none or it is not JSON. */
async function readManifest(input: HTMLInputElement): Promise<Manifest> {
  const f = input.files?.[0];
  if (!f) throw { code: "invalid-argument", message: "choose the export's manifest (FILE.manifest.json)" } satisfies ErrorBody;
  try {
    return JSON.parse(await f.text()) as Manifest;
  } catch (e) {
    throw { code: "invalid-argument", message: `${f.name}: not a manifest: ${String(e)}` } satisfies ErrorBody;
  }
}
