// The console's shell: navigation, keys, the signed-in operator, jobs and the action dialog; each
// view is a module of views/. Every decision (what is stuck, what may be resolved, what a purge
// touches) is made by the operations behind the transport; the console shows their answers and
// asks the operator for a reason.
import type { EntrySummary } from "./bindings/EntrySummary";
import type { ErrorBody } from "./bindings/ErrorBody";
import type { Event } from "./bindings/Event";
import type { Identity } from "./bindings/Identity";
import { allows, COMMANDS, type CommandName } from "./bindings/commands";
import { clear, h } from "./dom";
import { toErrorBody, type Transport } from "./transport";
import { VirtualList } from "./vlist";
import { searchFilter, type ActionSpec, type Prefs, type Shell, type View } from "./shell";
import { overview } from "./views/overview";
import { logView } from "./views/log";
import { incidents } from "./views/incidents";
import { approvals } from "./views/approvals";
import { exportView } from "./views/export";
import { entryView } from "./views/entry";
import { entryList, expiries } from "./views/entries";

const NAV: [View, string, string][] = [
  ["overview", "Overview", "1"],
  ["log", "Log", "2"],
  ["stuck", "Stuck", "3"],
  ["collisions", "Collisions", "4"],
  ["expiries", "Expiries", "5"],
  ["incidents", "Incidents", "6"],
  ["export", "Export", "7"],
  ["approvals", "Approvals", "8"],
];

export class App implements Shell {
  view: View = "overview";
  main!: HTMLElement;
  private banner!: HTMLElement;
  private ledgerLabel!: HTMLElement;
  list: VirtualList<EntrySummary> | VirtualList<Event> | null = null;
  timers: number[] = [];
  lastEntry: number | null = null;
  viewKeys: ((key: string) => boolean) | null = null;
  private searchTerm = "";
  archiveDir: string | null = null;
  /** The signed-in operator in a browser; `null` on the desktop, where every action is offered. */
  private who: Identity | null = null;
  private operatorSlot!: HTMLElement;

  constructor(
    private readonly root: HTMLElement,
    readonly t: Transport,
    readonly prefs: Prefs,
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

  gate(cmd: CommandName, enabled = true): Record<string, string | boolean> {
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
        h("button", { testid: `nav-${v}`, class: "nav", title: `${label} (${k})`, on: { click: () => void this.go(v) } }, label, v === "approvals" ? h("span", { class: "badge hidden", testid: "approvals-badge" }) : null),
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
      on: {
        change: (e) => {
          this.prefs.setItem("operator", (e.target as HTMLInputElement).value.trim());
          // Who may decide on a held call is judged by this name too: its views ask again.
          if (this.view === "approvals" || this.view === "entry") void this.go(this.view);
        },
      },
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
    if (this.viewKeys?.(e.key)) e.preventDefault();
    else if (nav) void this.go(nav[0]);
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
    this.viewKeys = null;
    void this.countApprovals();
    // The sidebar marks the view shown and nothing else: Search and an entry have no item of their own.
    for (const b of this.root.querySelectorAll("nav button")) {
      const here = (b as HTMLElement).dataset.testid === `nav-${view}`;
      b.classList.toggle("active", here);
      if (here) b.setAttribute("aria-current", "page");
      else b.removeAttribute("aria-current");
    }
    clear(this.main);
    this.main.dataset.view = view;
    try {
      switch (view) {
        case "overview": return await overview(this);
        case "log": return await logView(this);
        case "stuck": return await entryList(this, "Stuck", "PENDING past its lease, or with an unknown outcome: held for you, never re-run automatically.", { stuck: true }, ["resolve", "release", "replay", "reconcile"]);
        case "collisions": return await entryList(this, "Collisions", "Keys that arrived again with a different request (422 key-reuse). Open one for the field-level diff.", { collisions: true }, []);
        case "expiries": return await expiries(this);
        case "incidents": return await incidents(this);
        case "approvals": return await approvals(this);
        case "export": return exportView(this);
        case "entry": return await entryView(this, entryId ?? this.lastEntry ?? 0);
        case "search": return await entryList(this, `Search · ${this.searchTerm}`, "Every entry whose subject (a customer, an order) or key is this, newest first; duplicate suspects are marked.", searchFilter(this.searchTerm), []);
      }
    } catch (e) {
      this.error(e);
    }
  }

  /** The Approvals item's badge: how many calls wait for a decision (none shown when none, or
   * when the ledger cannot say). */
  private async countApprovals(): Promise<void> {
    const badge = this.root.querySelector("[data-testid=approvals-badge]");
    if (!badge) return;
    const waiting = await this.t.ops.approvals({ open: true, before: null, limit: 1000 }).catch(() => []);
    badge.textContent = waiting.length ? String(waiting.length) : "";
    badge.classList.toggle("hidden", waiting.length === 0);
  }

  // ---- jobs and the action dialog -----------------------------------------------------------

  /**
   * Runs one server-side job for the action dialog: its progress reported against `count`, the
   * dialog's Stop cancelling it, and a summary of its report, or of what was heard before Stop
   * when the report is lost with the request (a browser drops it).
   */
  async runJob<T>(kind: string, count: number, progress: (done: number, total: number) => void, stop: AbortSignal, call: (job: string) => Promise<T | null>, say: { stopped: string; done: (r: T) => string }): Promise<string> {
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
        ...p.skipped.slice(0, 20).map(([id, why]) => h("p", { class: "hint", testid: "preview-skipped" }, `skipped ${id}: ${why}`)),
        p.skipped.length > 20 ? h("p", { class: "hint" }, `… and ${p.skipped.length - 20} more skipped`) : null,
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
}
