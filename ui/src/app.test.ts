// The UI against a mocked IPC: TauriTransport over a fake `invoke`, so the commands' names and
// argument shapes are what is tested, with the views and the action dialog driven like a user.
import { actions, ADA, base, entry, inBrowser, q, setup, tick, until } from "./test-support";
import { isoTime } from "./format";

describe("console UI", () => {
  it("hands each view the shell's interface: no view imports the shell's module", () => {
    // Vite reads each view's source as text; `import type` counts too (a view would then depend
    // on the shell's class instead of its interface).
    const sources = import.meta.glob<string>("./views/*.ts", { query: "?raw", import: "default", eager: true });
    const views = Object.entries(sources).filter(([path]) => !path.endsWith(".test.ts"));
    expect(views.length).toBeGreaterThanOrEqual(7);
    for (const [path, src] of views) expect(src, path).not.toMatch(/from "\.\.\/app"/);
  });

  it("shows the overview counts from the stats command", async () => {
    const { app } = setup(base);
    await app.start();
    expect(q("stat-stuck").textContent).toContain("2");
    expect(q("stat-collisions").textContent).toContain("1");
    expect(q("ledger-label").textContent).toContain("/tmp/demo.db");
    for (const v of ["overview", "log", "stuck", "collisions", "expiries", "incidents", "export"]) expect(q(`nav-${v}`)).toBeTruthy();
  });

  it("draws each chart with its scale, its time axis and an hour's count on hover", async () => {
    const hour = 3_600_000;
    const last = Date.now() - (Date.now() % hour);
    const series = [{ hour: last, kind: "complete", count: 7 }, { hour: last - 2 * hour, kind: "complete", count: 3 }];
    const { app } = setup({ ...base, stats: () => ({ ...base.stats(), series }) });
    await app.start();
    expect(q("chart-complete").querySelector("figcaption")?.textContent).toBe("executions · 10 in 72h");
    expect([...q("chart-complete-y").children].map((e) => e.textContent)).toEqual(["7", "0"]);
    expect([...q("chart-complete-x").children].map((e) => e.textContent).slice(1)).toEqual(["−48h", "−24h", "now"]);
    const hours = q("chart-complete").querySelectorAll("rect.hour");
    expect(hours.length).toBe(72);
    hours[69].dispatchEvent(new MouseEvent("mouseenter"));
    // Two hours ago is yesterday just after midnight: then the hour carries its date, in the
    // locale's order ("27 Nov" or "Nov 27").
    expect(q("chart-complete-readout").textContent).toMatch(/^(\d+ \w+ |\w+ \d+ )?\d\d:00–\d\d:00: 3 executions$/);
    hours[71].dispatchEvent(new MouseEvent("mouseenter"));
    expect(q("chart-complete-readout").textContent).toMatch(/: 7 executions$/);
    expect(hours[71].querySelector("title")?.textContent).toBe(q("chart-complete-readout").textContent);
    hours[71].dispatchEvent(new MouseEvent("mouseleave"));
    expect(q("chart-complete-readout").textContent).toBe("10 in 72h · hover for an hour's count");
    // An empty series still has a scale: 1 at the top, the line along the bottom.
    expect([...q("chart-collision-y").children].map((e) => e.textContent)).toEqual(["1", "0"]);
  });

  it("lists stuck entries with the stuck filter and keyset paging", async () => {
    const { app, calls } = setup({ ...base, entries: (a) => (!a.oldest_first ? { entries: [entry(7), entry(5)], next_before: null, next_after: null } : a.after === null ? { entries: [entry(5), entry(7)], next_before: null, next_after: 7 } : { entries: [entry(9)], next_before: null, next_after: null }) });
    await app.start();
    await app.go("stuck");
    await tick();
    const ids = () => [...document.querySelectorAll('[data-testid="entry-row"]')].map((r) => (r as HTMLElement).dataset.entryId);
    expect(ids()).toEqual(["7", "5"]);
    const call = calls.find(([c]) => c === "entries");
    expect(call?.[1]).toMatchObject({ stuck: true, before: null, after: null, oldest_first: false, limit: 200 });
    // Each column is named above the rows, and a value cut to fit is whole on hover.
    const head = () => [...document.querySelectorAll('[data-testid="list-header"] [role="columnheader"]')].map((c) => c.textContent);
    expect(head()).toEqual(["id ▼", "state", "route", "scope", "idempotency key", "subjects", "created ▼", "×", "note"]);
    const key = document.querySelector('[data-testid="entry-row"] [data-testid="row-key"]') as HTMLElement;
    expect(key.title).toBe(key.textContent);
    // The id column sorts: oldest first, read by the ledger in that order and paged after the last.
    expect(q("sort-id").getAttribute("aria-sort")).toBe("descending");
    q("sort-id").click();
    for (let i = 0; i < 20 && ids().length < 3; i++) await tick();
    expect(ids()).toEqual(["5", "7", "9"]);
    const oldest = calls.filter(([c]) => c === "entries").slice(-2).map(([, a]) => a);
    expect(oldest[0]).toMatchObject({ stuck: true, before: null, after: null, oldest_first: true });
    expect(oldest[1]).toMatchObject({ stuck: true, before: null, after: 7, oldest_first: true });
    expect(head()[0]).toBe("id ▲");
    expect(q("sort-age").getAttribute("aria-sort")).toBe("ascending");
  });

  it("shows an MCP entry as route · tool with its call, and filters by tool", async () => {
    const mcp = entry(9, { route: "tools", tool: "charge", state: "completed", stuck: false });
    const call = { label: "tools · charge", tool: "charge", arguments: { customer: "cus_1", amount: 4999 }, result_text: "charged", structured: null, is_error: false, error: null };
    const show = () => ({ entry: { ...mcp, lease_owner: null, request: null, response: null, last_replay_at: null, completed_at: null, resolved_by: null, resolution_reason: null, external_ref: null, collision_requests: [] }, timeline: [], collision_diffs: [], actions: actions("purge"), call });
    const { app, calls } = setup({ ...base, show, entries: () => ({ entries: [mcp], next_before: null }) });
    await app.start();
    await app.go("stuck");
    await tick();
    expect(document.querySelector('[data-testid="entry-row"] .route')?.textContent).toBe("tools · charge");
    const input = q("filter-input") as HTMLInputElement;
    input.value = "tool:charge";
    input.dispatchEvent(new Event("change"));
    await tick();
    expect(calls.filter(([c]) => c === "entries").slice(-1)[0]?.[1]).toMatchObject({ tool: "charge", key: null });
    await app.go("entry", 9);
    expect(document.querySelector("h1")?.textContent).toContain("tools · charge");
    expect(q("tool-call").textContent).toContain('{"customer":"cus_1","amount":4999}');
    expect(q("tool-call").textContent).toContain("charged");
  });

  it("finds a customer's charges from the header's search box, the double charge marked", async () => {
    const first = entry(3, { state: "completed", stuck: false, scope: "billing-01", subjects: [["amount", "49.99"], ["customer", "cus_123"]] });
    const dup = entry(4, { state: "completed", stuck: false, scope: "billing-02", duplicate_of: 3, subjects: [["amount", "49.99"], ["customer", "cus_123"]] });
    const { app, calls } = setup({ ...base, entries: () => ({ entries: [dup, first], next_before: null }) });
    await app.start();
    await app.go("stuck");
    const current = () => [...document.querySelectorAll("nav button.active, nav [aria-current]")].map((b) => (b as HTMLElement).dataset.testid);
    expect(current()).toEqual(["nav-stuck"]);
    const box = q("search-input") as HTMLInputElement;
    box.value = "customer:cus_123";
    box.dispatchEvent(new Event("change"));
    await tick();
    expect(calls.filter(([c]) => c === "entries").slice(-1)[0]?.[1]).toMatchObject({ subject: "customer=cus_123", search: null, stuck: false });
    expect(current(), "the sidebar marks no view while Search shows").toEqual([]);
    expect(q("row-duplicate").textContent).toBe("⚠ duplicate of #3");
    expect([...document.querySelectorAll('[data-testid="row-subjects"]')].map((e) => e.textContent)).toEqual(["49.99 · cus_123", "49.99 · cus_123"]);
    box.value = "cus_123";
    box.dispatchEvent(new Event("change"));
    await tick();
    expect(calls.filter(([c]) => c === "entries").slice(-1)[0]?.[1]).toMatchObject({ subject: null, search: "cus_123" });
  });

  it("copies a stored request as curl through the proxy the console runs, or names the default", async () => {
    const show = () => ({ entry: { ...entry(7), request: { method: "POST", path: "/v1/charges?mode=live", headers: [["idempotency-key", "key-7"]], body: "{}" }, response: null, last_replay_at: null, completed_at: null, resolved_by: null, resolution_reason: null, external_ref: null, collision_requests: [] }, timeline: [], collision_diffs: [], actions: actions("purge") });
    let running = true;
    const { app } = setup({ ...base, show, proxy_status: () => ({ running, config: "/etc/idemgate.toml", proxy_addr: "127.0.0.1:9100", admin_addr: null, error: null }) });
    await app.start();
    await app.go("entry", 7);
    expect(q("curl").textContent).toBe(`curl -X POST 'http://127.0.0.1:9100/v1/charges?mode=live' -H 'idempotency-key: key-7' --data-raw '{}'`);
    expect(q("curl-hint").textContent).toBe("");
    running = false;
    await app.go("entry", 7);
    expect(q("curl").textContent).toContain("'http://127.0.0.1:8700/v1/charges?mode=live'");
    expect(q("curl-hint").textContent).toContain("default address");
  });

  it("resolves with a reason and the operator's name, after a preview", async () => {
    const show = () => ({ entry: { ...entry(7), lease_owner: "p", request: { method: "POST", path: "/v1/charges", headers: [], body: "{}" }, response: null, last_replay_at: null, completed_at: null, resolved_by: null, resolution_reason: null, external_ref: null, collision_requests: [] }, timeline: [], collision_diffs: [], actions: actions("purge") });
    const { app, calls, prefs } = setup({
      ...base, show,
      preview_resolve: () => ({ action: "resolve", count: 1, ids: [7], keys: ["key-7"], destructive: false, skipped: [] }),
      resolve: () => entry(7, { state: "completed", stuck: false }),
    });
    prefs.set("operator", "dana");
    await app.start();
    await app.go("entry", 7);
    q("action-resolve").click();
    await tick();
    expect(q("preview-keys").textContent).toContain("key-7");
    // No reason: refused in the dialog, nothing sent.
    q("confirm-button").click();
    await tick();
    expect(calls.some(([c]) => c === "resolve")).toBe(false);
    expect(q("dialog-message").textContent).toContain("reason is required");
    (q("external-ref-input") as HTMLInputElement).value = "ch_9";
    (q("reason-input") as HTMLTextAreaElement).value = "found it upstream";
    q("confirm-button").click();
    await tick();
    const r = calls.find(([c]) => c === "resolve");
    expect(r?.[1]).toMatchObject({ entry_id: 7, as: "completed", external_ref: "ch_9", operator: "dana", reason: "found it upstream", confirm_destructive: false });
  });

  it("asks a failed entry's response for its error status instead of sending 200", async () => {
    const show = () => ({ entry: { ...entry(7), lease_owner: "p", request: null, response: null, last_replay_at: null, completed_at: null, resolved_by: null, resolution_reason: null, external_ref: null, collision_requests: [] }, timeline: [], collision_diffs: [], actions: actions("purge") });
    const { app, calls, prefs } = setup({
      ...base, show,
      preview_resolve: () => ({ action: "resolve", count: 1, ids: [7], keys: ["key-7"], destructive: false, skipped: [] }),
      resolve: () => entry(7, { state: "failed", stuck: false }),
    });
    prefs.set("operator", "dana");
    await app.start();
    await app.go("entry", 7);
    q("action-resolve").click();
    await tick();
    const as = q("resolve-as") as HTMLSelectElement;
    const status = q("response-status") as HTMLInputElement;
    expect(status.value).toBe("200");
    as.value = "failed";
    as.dispatchEvent(new Event("change"));
    expect(status.value).toBe("");
    expect(status.min).toBe("400");
    status.value = "402";
    (q("response-body") as HTMLTextAreaElement).value = '{"error":"card_declined"}';
    (q("reason-input") as HTMLTextAreaElement).value = "declined upstream";
    q("confirm-button").click();
    await tick();
    const r = calls.find(([c]) => c === "resolve");
    expect(r?.[1]).toMatchObject({ entry_id: 7, as: "failed", response: { status: 402, headers: [], body: '{"error":"card_declined"}' } });
    // Back to completed, an emptied status is a success again.
    as.value = "completed";
    as.dispatchEvent(new Event("change"));
    expect(status.value).toBe("402");
  });

  it("needs a second confirmation on a destructive route", async () => {
    const { app, calls, prefs } = setup({
      ...base,
      show: () => ({ entry: { ...entry(8, { effect: "destructive" }), lease_owner: null, request: null, response: null, last_replay_at: null, completed_at: null, resolved_by: null, resolution_reason: null, external_ref: null, collision_requests: [] }, timeline: [], collision_diffs: [], actions: actions("purge") }),
      preview_resolve: () => ({ action: "release", count: 1, ids: [8], keys: ["key-8"], destructive: true, skipped: [] }),
      resolve: () => entry(8, { state: "released", stuck: false }),
    });
    prefs.set("operator", "dana");
    await app.start();
    await app.go("entry", 8);
    q("action-release").click();
    await tick();
    expect(calls.find(([c]) => c === "preview_resolve")?.[1]).toEqual({ entry_id: 8, as: "released" });
    (q("reason-input") as HTMLTextAreaElement).value = "customer asked";
    q("confirm-button").click();
    await tick();
    expect(calls.some(([c]) => c === "resolve")).toBe(false);
    expect(q("confirm-button").textContent).toContain("Confirm again");
    q("confirm-button").click();
    await tick();
    expect(calls.find(([c]) => c === "resolve")?.[1]).toMatchObject({ as: "released", confirm_destructive: true });
  });

  it("purges every expired entry as a job: its progress after each chunk, and Stop cancels it between two", async () => {
    let emit: ((e: { payload: unknown }) => void) | null = null;
    let finish: ((r: unknown) => void) | null = null;
    const { app, calls, prefs } = setup({
      ...base,
      entries: () => ({ entries: [], next_before: null }),
      preview_purge: () => ({ action: "purge", count: 2500, ids: [1], keys: ["key-1"], destructive: false, skipped: [] }),
      purge: (args) => new Promise((r) => { finish = r; emit?.({ payload: { job: args.job, done: 1000, total: null } }); }),
      cancel_job: () => { finish?.({ purged: Array.from({ length: 1000 }, (_, i) => i + 1), cancelled: true }); return true; },
    }, async (event, f) => { if (event === "job-progress") emit = f; return () => { emit = null; }; });
    prefs.set("operator", "dana");
    await app.start();
    await app.go("expiries");
    await tick();
    q("action-purge").click();
    await tick();
    (q("reason-input") as HTMLTextAreaElement).value = "retention";
    q("confirm-button").click();
    await tick();
    const purge = calls.find(([c]) => c === "purge");
    expect(purge?.[1]).toMatchObject({ target: "expired", filter: { expired: true }, operator: "dana", reason: "retention" });
    const bar = q("action-dialog").querySelector("progress") as HTMLProgressElement;
    expect([bar.value, bar.max]).toEqual([1000, 2500]);
    expect(q("cancel-button").textContent).toBe("Stop");
    q("cancel-button").click();
    await tick();
    await tick();
    expect(calls.find(([c]) => c === "cancel_job")?.[1]).toEqual({ job: purge?.[1].job });
    // Stop keeps the dialog open, for the summary; Close closes it.
    expect(q("dialog-message").textContent).toBe("purged 1000 entries of 2500: stopped; the rest are as they were");
    expect(emit).toBeNull();
    expect(q("cancel-button").textContent).toBe("Close");
    q("cancel-button").click();
    expect(q("action-dialog")).toBeNull();
  });

  it("bulk-releases the selected stuck entries through one bulk job, previewed by the operations layer", async () => {
    const { app, calls, prefs } = setup({
      ...base,
      entries: () => ({ entries: [entry(1), entry(2), entry(3)], next_before: null }),
      preview_bulk: () => ({ action: "resolve", count: 2, ids: [3, 1], keys: ["key-3", "key-1"], destructive: false, skipped: [] }),
      bulk: () => ({ action: "resolve", total: 2, attempted: 2, succeeded: 1, failed: 1, failures: [{ id: 1, key: "key-1", code: "conflict", message: "entry 1 cannot be resolved" }], cancelled: false }),
    });
    prefs.set("operator", "dana");
    await app.start();
    await app.go("stuck");
    await tick();
    const boxes = [...document.querySelectorAll('[data-testid="row-select"]')] as HTMLInputElement[];
    boxes[0].click();
    boxes[2].click();
    q("bulk-release").click();
    await tick();
    await tick();
    // The preview the dialog shows is the operations layer's, not one built from the list.
    const preview = calls.find(([c]) => c === "preview_bulk");
    expect(preview?.[1]).toMatchObject({ action: "resolve", target: { filter: { stuck: true }, ids: [1, 3] } });
    expect(q("preview-keys").textContent).toContain("3 · key-3");
    (q("reason-input") as HTMLTextAreaElement).value = "processor confirms none ran";
    q("confirm-button").click();
    await tick();
    await tick();
    const bulk = calls.filter(([c]) => c === "bulk");
    expect(bulk).toHaveLength(1);
    expect(bulk[0][1]).toMatchObject({ action: "resolve", as: "released", target: { ids: [1, 3] }, operator: "dana", reason: "processor confirms none ran", confirm_destructive: false });
    expect(calls.some(([c]) => c === "resolve")).toBe(false);
    expect(q("dialog-message").textContent).toBe("1 of 2 done; 1 failed: 1: entry 1 cannot be resolved");
  });

  it("shows a bulk preview's refusals, the first twenty of many", async () => {
    const skipped = Array.from({ length: 25 }, (_, i) => [i + 1, "entry is completed; resolve needs a stuck, released or failed entry"]);
    const { app } = setup({
      ...base,
      entries: () => ({ entries: [entry(1), entry(2)], next_before: null }),
      preview_bulk: () => ({ action: "resolve", count: 0, ids: [], keys: [], destructive: false, skipped }),
    });
    await app.start();
    await app.go("stuck");
    await tick();
    q("bulk-release").click();
    await until(() => q("preview-skipped"));
    const shown = [...document.querySelectorAll('[data-testid="preview-skipped"]')].map((e) => e.textContent);
    expect(shown).toHaveLength(20);
    expect(shown[0]).toBe("skipped 1: entry is completed; resolve needs a stuck, released or failed entry");
    expect(q("action-dialog").textContent).toContain("… and 5 more skipped");
    expect(q("confirm-button").textContent).toBe("Nothing to do");
  });

  it("filters the log by any kind of event the ledger has, an approval's included", async () => {
    const { app, calls } = setup({ ...base, log: () => ({ events: [], next_before: null }) });
    await app.start();
    await app.go("log");
    const kind = q("log-kind") as HTMLSelectElement;
    const offered = [...kind.options].map((o) => o.value);
    for (const k of ["claim", "review", "loop_suspect", "checkpoint", "approval_requested", "approved", "rejected", "approval_expired"]) expect(offered).toContain(k);
    kind.value = "approved";
    kind.dispatchEvent(new Event("change"));
    await until(() => calls.some(([c, a]) => c === "log" && (a as { kind: string | null }).kind === "approved"));
    expect(calls.some(([c, a]) => c === "log" && (a as { kind: string | null }).kind === "approved")).toBe(true);
  });

  it("shows a typed error from a command with its code", async () => {
    const { app } = setup({ ...base, entries: () => { throw { code: "ledger-unavailable", message: "locked" }; } });
    await app.start();
    await app.go("stuck");
    await tick();
    expect(q("error-banner").textContent).toContain("ledger-unavailable");
  });

  it("renders ledger data as text, never as HTML", async () => {
    const { app } = setup({ ...base, entries: () => ({ entries: [entry(1, { key: "<img src=x onerror=alert(1)>" })], next_before: null }) });
    await app.start();
    await app.go("stuck");
    await tick();
    expect(document.querySelector("img")).toBeNull();
    expect(q("entry-row").textContent).toContain("<img src=x");
  });
});

describe("console UI, keyboard and ledgers", () => {
  it("switches views with 1-7 and opens the selected entry with j/k and Enter", async () => {
    const show = () => ({ entry: { ...entry(5), lease_owner: null, request: null, response: null, last_replay_at: null, completed_at: null, resolved_by: null, resolution_reason: null, external_ref: null, collision_requests: [] }, timeline: [], collision_diffs: [], actions: actions("purge") });
    const { app, calls } = setup({ ...base, show, entries: () => ({ entries: [entry(7), entry(5)], next_before: null }) });
    await app.start();
    const key = (k: string) => document.body.dispatchEvent(new KeyboardEvent("keydown", { key: k, bubbles: true }));
    key("3");
    await tick();
    await tick();
    expect(app.view).toBe("stuck");
    key("j");
    key("j");
    expect(document.querySelector(".row.selected")?.getAttribute("data-entry-id")).toBe("5");
    key("Enter");
    await tick();
    expect(app.view).toBe("entry");
    expect(calls.find(([c]) => c === "show")?.[1]).toEqual({ entry_id: 5 });
  });

  it("opens another ledger from the header and remembers it", async () => {
    const { app, calls, prefs } = setup({ ...base, open_ledger: (a) => ({ location: a.path, error: null }) });
    await app.start();
    (q("ledger-input") as HTMLInputElement).value = "/srv/other.db";
    q("ledger-open").click();
    await tick();
    await tick();
    expect(calls.find(([c]) => c === "open_ledger")?.[1]).toEqual({ path: "/srv/other.db" });
    expect(q("ledger-label").textContent).toContain("/srv/other.db");
    expect(JSON.parse(prefs.get("recent") ?? "[]")[0]).toBe("/srv/other.db");
  });

  it("keeps the open ledger when another cannot be opened", async () => {
    const { app } = setup({ ...base, open_ledger: () => { throw { code: "ledger-not-found", message: "no ledger at /nope.db" }; } });
    await app.start();
    (q("ledger-input") as HTMLInputElement).value = "/nope.db";
    q("ledger-open").click();
    await tick();
    expect(q("error-banner").textContent).toContain("ledger-not-found");
    expect(q("ledger-label").textContent).toContain("/tmp/demo.db");
  });

  it("exports in a browser through the admin API: no server path asked, the files downloaded", async () => {
    const manifest = { manifest_version: 1, format: "csv", alg: "sha256", file: "idemgate-export-ab12.csv", sha256: "00", bytes: 3, count: 2, first_seq: 1, last_seq: 2, first_prev_hash: null, chain_head: null, ledger_head: null, since: null, until: null, created_at: "t", ledger: "l" };
    const done = { id: "ab12", state: "done", format: "csv", since: null, until: null, created_at: "t", ended_at: "t", expires_at: "t", done: 2, manifest, error: null, file_url: "/admin/v1/exports/ab12/file", manifest_url: "/admin/v1/exports/ab12/manifest" };
    const bodies: string[] = [];
    const fake = (async (url: string, init?: RequestInit) => {
      if (init?.body) bodies.push(String(init.body));
      if (url.endsWith("/admin/v1/whoami")) return new Response(JSON.stringify(ADA), { status: 200 });
      if (url.includes("/admin/v1/stats")) return new Response(JSON.stringify(base.stats()), { status: 200 });
      if (url.endsWith("/admin/v1/server")) return new Response(JSON.stringify({ version: "0.1.0", proxy_addr: "127.0.0.1:8700", admin_addr: "127.0.0.1:8701", ledger: "/var/lib/idemgate/ledger.db" }), { status: 200 });
      if (url.endsWith("/file")) return new Response("a,b\n", { status: 200 });
      return new Response(JSON.stringify(url.endsWith("/manifest") ? manifest : done), { status: url.endsWith("/exports") ? 202 : 200 });
    }) as unknown as typeof fetch;
    const saved: string[] = [];
    const app = await inBrowser(fake, (name) => void saved.push(name));
    // The server's ledger and its own proxy: nothing to open, start or stop from a browser.
    expect(q("stat-stuck").textContent).toContain("2");
    expect(q("ledger-input")).toBeNull();
    expect(q("ledger-open")).toBeNull();
    expect(q("proxy-panel")).toBeNull();
    expect(q("ledger-label").textContent).toBe("ledger: /var/lib/idemgate/ledger.db (idemgate serve at http://x)");
    await app.go("export");
    expect(q("export-path")).toBeNull();
    expect(q("export-overwrite")).toBeNull();
    expect(q("verify-path"), "a file to verify is uploaded, not named").toBeNull();
    expect(q("action-verify-ledger")).toBeTruthy();
    (q("export-format") as HTMLSelectElement).value = "csv";
    q("action-export").click();
    await until(() => q("export-result").textContent?.includes("sha256"));
    expect(JSON.parse(q("export-result").textContent ?? "")).toEqual(manifest);
    expect(JSON.parse(bodies[0])).toEqual({ what: "events", format: "csv", since: null, until: null });
    expect(saved).toEqual(["idemgate-export-ab12.csv", "idemgate-export-ab12.csv.manifest.json"]);
    // The entries with their outcomes, as on the desktop: the same job, asked for entries.
    (q("export-what") as HTMLSelectElement).value = "entries";
    q("action-export").click();
    await until(() => bodies.length >= 2);
    expect(JSON.parse(bodies[1])).toEqual({ what: "entries", format: "csv", since: null, until: null });
  });

  it("shows the log's head to note beside the export, and says when the log is empty", async () => {
    let head: { seq: number; hash: string } | null = { seq: 5821, hash: "ab12cd" };
    const { app } = setup({ ...base, head: () => head });
    await app.start();
    await app.go("export");
    for (let i = 0; i < 20 && !q("log-head").textContent; i++) await tick();
    expect(q("log-head").textContent).toBe("The log's head now: #5821 ab12cd");
    head = null;
    await app.go("export");
    for (let i = 0; i < 20 && !q("log-head").textContent; i++) await tick();
    expect(q("log-head").textContent).toBe("The log is empty.");
  });

  it("exports on the desktop without replacing a file unless Replace is ticked", async () => {
    const manifest = { manifest_version: 1, format: "ndjson", alg: "sha256", file: "a.ndjson", sha256: "00", bytes: 3, count: 2, first_seq: 1, last_seq: 2, first_prev_hash: null, chain_head: null, ledger_head: null, since: null, until: null, created_at: "t", ledger: "l" };
    const { app, calls } = setup({ ...base, export: (a) => { if (!(a as { overwrite: boolean }).overwrite) throw { code: "conflict", message: "/audit/a.ndjson already exists" }; return manifest; } });
    await app.start();
    await app.go("export");
    (q("export-path") as HTMLInputElement).value = " /audit/a.ndjson ";
    q("action-export").click();
    for (let i = 0; i < 20 && !q("export-result").textContent?.includes("conflict"); i++) await tick();
    expect(q("export-result").textContent).toBe("conflict: /audit/a.ndjson already exists");
    expect(calls.find(([c]) => c === "export")?.[1]).toMatchObject({ path: "/audit/a.ndjson", overwrite: false });
    (q("export-overwrite") as HTMLInputElement).checked = true;
    q("action-export").click();
    for (let i = 0; i < 20 && !q("export-result").textContent?.includes("sha256"); i++) await tick();
    expect(calls.filter(([c]) => c === "export")[1][1]).toMatchObject({ path: "/audit/a.ndjson", overwrite: true });
    expect(JSON.parse(q("export-result").textContent ?? "")).toEqual(manifest);
  });

  it("shows the retention policy's last run on the overview, and says when none has run", async () => {
    const since = Date.UTC(2026, 10, 27, 9, 30);
    const status = { policy: "retention policy: entries = 30d, log_hot = 90d, archive_dir = /arch", last_run_at: Date.now() - 60_000, last_run: { purged: 12, segments: 2, archived_through: 9000, removed: 9000 }, segments: 5, archived_through: 9000, archive_dir: "/arch", leader: { instance: "db-2:812:0a1f", since } };
    const { app } = setup({ ...base, retention_status: () => status });
    await app.start();
    expect(q("retention-policy").textContent).toBe(status.policy);
    expect(q("retention-last-run").textContent).toContain("purged 12 · 2 segment(s) sealed");
    expect(q("retention-archive").textContent).toBe("archived through #9000 in 5 segment(s) · /arch");
    expect(q("retention-leader").textContent).toBe(`kept by instance db-2:812:0a1f, leading since ${isoTime(since)}`);
    const none = setup({ ...base, retention_status: () => ({ ...status, policy: null, last_run_at: null, last_run: null, segments: 0, archived_through: null, archive_dir: null, leader: null }) });
    await none.app.start();
    expect(q("retention-none")).toBeTruthy();
    expect(document.querySelector('[data-testid="retention-leader"]')).toBeNull();
  });

  it("lists the archive's segments and verifies them with progress, naming a bad one", async () => {
    const seg = (first: number, last: number, over: Record<string, unknown> = {}) => ({ file: `events-${first}-${last}.ndjson.gz`, first_seq: first, last_seq: last, count: last - first + 1, bytes: 90_000, checkpoint: { origin: "h/idemgate", seq: last, hash: "abcdef0123456789", time: "t", key: "k", note: "n" }, recorded: true, checked: false, ok: true, problems: [], ...over });
    const status = { policy: "p", last_run_at: 1, last_run: null, segments: 2, archived_through: 20, archive_dir: "/arch", leader: null };
    let progress: ((e: { payload: unknown }) => void) | null = null;
    const listen = async (_: string, f: (e: { payload: unknown }) => void) => { progress = f; return () => { progress = null; }; };
    const report = { ok: false, dir: "/arch", segments: [seg(1, 10, { checked: true }), seg(11, 20, { checked: true, ok: false, problems: ["altered: seq 15: hash does not match the event's contents"] })], live: null, count: 20, head: null, problems: ["events-11-20.ndjson.gz: altered: seq 15: hash does not match the event's contents"], unfinished: [], cancelled: false };
    const { app, calls } = setup({ ...base, retention_status: () => status, archive_segments: () => [seg(1, 10), seg(11, 20)], verify_archive: async (a) => { progress?.({ payload: { job: a.job, done: 4096, total: null } }); return report; } }, listen);
    await app.start();
    await app.go("export");
    expect((q("archive-dir") as HTMLInputElement).value).toBe("/arch");
    q("action-archive-list").click();
    for (let i = 0; i < 20 && !document.querySelector('[data-testid="segment-row"]'); i++) await tick();
    expect(calls.find(([c]) => c === "archive_segments")?.[1]).toEqual({ path: "/arch" });
    expect(document.querySelectorAll('[data-testid="segment-row"]').length).toBe(2);
    expect(q("segment-signed").textContent).toBe("#10 abcdef012345… by h/idemgate");
    q("action-archive-verify").click();
    for (let i = 0; i < 20 && !document.querySelector('[data-testid="archive-verdict"]'); i++) await tick();
    expect(calls.find(([c]) => c === "verify_archive")?.[1]).toMatchObject({ path: "/arch" });
    expect(q("archive-verdict").textContent).toBe("FAILED");
    expect(q("archive-problem").textContent).toContain("events-11-20.ndjson.gz: altered: seq 15");
    const statuses = [...document.querySelectorAll('[data-testid="segment-status"]')].map((e) => e.textContent);
    expect(statuses).toEqual(["ok", "altered: seq 15: hash does not match the event's contents"]);
  });

  it("exports entries with their outcomes on the desktop", async () => {
    const manifest = { manifest_version: 1, kind: "entries", format: "csv", file: "e.csv", sha256: "00", bytes: 3, count: 2, since: null, until: null, ledger_head: null, created_at: "t", ledger: "l" };
    const { app, calls } = setup({ ...base, export_entries: () => manifest });
    await app.start();
    await app.go("export");
    (q("export-what") as HTMLSelectElement).value = "entries";
    (q("export-format") as HTMLSelectElement).value = "csv";
    (q("export-path") as HTMLInputElement).value = "/audit/e.csv";
    q("action-export").click();
    for (let i = 0; i < 20 && !q("export-result").textContent?.includes("entries"); i++) await tick();
    expect(calls.find(([c]) => c === "export_entries")?.[1]).toMatchObject({ format: "csv", path: "/audit/e.csv" });
    expect(calls.some(([c]) => c === "export")).toBe(false);
  });

  it("checks an export's manifest against the open ledger (desktop: by the export's path)", async () => {
    const report = { ok: true, chain: { ok: true, alg: "sha256", count: 10, first_seq: 1, head: null, first_bad_seq: null, problem: null, cancelled: false }, heads: [[{ seq: 10, hash: "h" }, true]], problems: [] };
    const { app, calls } = setup({ ...base, verify_against: () => report });
    await app.start();
    await app.go("export");
    (q("verify-path") as HTMLInputElement).value = "/audit/march.ndjson";
    q("action-verify-against").click();
    for (let i = 0; i < 20 && !q("verify-result").textContent?.includes("heads"); i++) await tick();
    expect(calls.find(([c]) => c === "verify_against")?.[1]).toMatchObject({ path: "/audit/march.ndjson.manifest.json" });
    expect(JSON.parse(q("verify-result").textContent ?? "")).toEqual(report);
    (q("verify-path") as HTMLInputElement).value = "/audit/march.ndjson.manifest.json";
    q("action-verify-against").click();
    for (let i = 0; i < 20 && calls.filter(([c]) => c === "verify_against").length < 2; i++) await tick();
    expect(calls.filter(([c]) => c === "verify_against")[1][1]).toMatchObject({ path: "/audit/march.ndjson.manifest.json" });
  });

  it("checks a manifest chosen in a browser against the server's ledger, and says when the file is not one", async () => {
    const bodies: string[] = [];
    const fake = (async (url: string, init?: RequestInit) => {
      if (init?.body) bodies.push(String(init.body));
      if (url.endsWith("/admin/v1/whoami")) return new Response(JSON.stringify(ADA), { status: 200 });
      if (url.endsWith("/admin/v1/verify/against")) return new Response(JSON.stringify({ ok: false, chain: {}, heads: [], problems: ["the ledger no longer holds seq 9"] }), { status: 200 });
      return new Response(JSON.stringify(base.stats()), { status: 200 });
    }) as unknown as typeof fetch;
    const app = await inBrowser(fake);
    await app.go("export");
    expect(q("verify-path")).toBeNull();
    const input = q("against-file") as HTMLInputElement;
    const choose = (text: string) => Object.defineProperty(input, "files", { value: [new File([text], "m.manifest.json")], configurable: true });
    choose('{"manifest_version":1,"ledger_head":{"seq":9,"hash":"h"}}');
    q("action-verify-against").click();
    await until(() => q("verify-result").textContent?.includes("problems"));
    expect(JSON.parse(bodies[bodies.length - 1])).toEqual({ manifest_version: 1, ledger_head: { seq: 9, hash: "h" } });
    expect(q("verify-result").textContent).toContain("no longer holds seq 9");
    choose("not json");
    q("action-verify-against").click();
    await until(() => q("verify-result").textContent?.includes("not a manifest"));
    expect(q("verify-result").textContent).toMatch(/^invalid-argument: m.manifest.json: not a manifest/);
  });

  it("lists and verifies the server's own archive in a browser, naming no path of the server", async () => {
    const seg = { file: "events-1-10.ndjson.gz", first_seq: 1, last_seq: 10, count: 10, bytes: 9000, checkpoint: null, recorded: true, checked: false, ok: true, problems: [] };
    const report = { ok: true, dir: "/var/lib/idemgate/archive", segments: [{ ...seg, checked: true }], live: null, count: 42, head: { seq: 42, hash: "h" }, problems: [], unfinished: [], cancelled: false };
    const urls: string[] = [];
    const fake = (async (url: string) => {
      urls.push(url);
      if (url.endsWith("/admin/v1/whoami")) return new Response(JSON.stringify(ADA), { status: 200 });
      if (url.endsWith("/admin/v1/archive")) return new Response(JSON.stringify([seg]), { status: 200 });
      if (url.endsWith("/admin/v1/archive/verify")) return new Response(`{"progress":10}\n{"result":${JSON.stringify(report)}}\n`, { status: 200, headers: { "content-type": "application/x-ndjson" } });
      return new Response(JSON.stringify(base.stats()), { status: 200 });
    }) as unknown as typeof fetch;
    const app = await inBrowser(fake);
    await app.go("export");
    expect(q("archive-dir"), "no directory of the server is asked for").toBeNull();
    q("action-archive-list").click();
    await until(() => document.querySelector('[data-testid="segment-row"]'));
    expect(document.querySelectorAll('[data-testid="segment-row"]').length).toBe(1);
    q("action-archive-verify").click();
    await until(() => document.querySelector('[data-testid="archive-verdict"]'));
    expect(q("archive-verdict").textContent).toBe("OK · 42 events verified, segments and live log, head #42");
    expect(urls.filter((u) => u.includes("/admin/v1/archive"))).toEqual(["http://x/admin/v1/archive", "http://x/admin/v1/archive/verify"]);
  });

  it("uploads an export file chosen in a browser with its manifest for the server to verify", async () => {
    const sent: FormData[] = [];
    const report = { ok: true, file: "march.ndjson", manifest: "march.ndjson.manifest.json", sha256_matches: true, manifest_matches: true, signature_ok: null, count: 12, first_seq: 1, last_seq: 12, head: null, first_bad_seq: null, problems: [] };
    const fake = (async (url: string, init?: RequestInit) => {
      if (url.endsWith("/admin/v1/whoami")) return new Response(JSON.stringify(ADA), { status: 200 });
      if (url.endsWith("/admin/v1/verify/export")) {
        sent.push(init?.body as FormData);
        expect(new Headers(init?.headers).get("content-type"), "the form's own multipart type").toBeNull();
        return new Response(JSON.stringify(report), { status: 200 });
      }
      return new Response(JSON.stringify(base.stats()), { status: 200 });
    }) as unknown as typeof fetch;
    const app = await inBrowser(fake);
    await app.go("export");
    const choose = (id: string, f: File | null) => Object.defineProperty(q(id), "files", { value: f ? [f] : [], configurable: true });
    choose("verify-file", null);
    q("action-verify").click();
    await until(() => q("verify-result").textContent?.includes("choose"));
    expect(q("verify-result").textContent).toBe("invalid-argument: choose the export file");
    expect(sent).toEqual([]);
    choose("verify-file", new File(["{}\n"], "march.ndjson"));
    choose("against-file", new File(["{}"], "march.ndjson.manifest.json"));
    q("action-verify").click();
    await until(() => q("verify-result").textContent?.includes("sha256"));
    expect(sent.length).toBe(1);
    expect((sent[0].get("file") as File).name).toBe("march.ndjson");
    expect((sent[0].get("manifest") as File).name).toBe("march.ndjson.manifest.json");
    expect(JSON.parse(q("verify-result").textContent ?? "")).toEqual(report);
  });

  it("offers a viewer only what a viewer may do, and records actions under the token's operator", async () => {
    const show = { entry: { ...entry(7, { state: "completed", stuck: false }), request: { method: "POST", path: "/v1/charges", headers: [], body: "{}" }, response: null, last_replay_at: null, completed_at: null, resolved_by: null, resolution_reason: null, external_ref: null, collision_requests: [] }, timeline: [], collision_diffs: [], actions: actions("resolve", "release", "replay", "reconcile") };
    let who: Record<string, unknown> = { name: "vic", role: "viewer", shared: false };
    const fake = (async (url: string) => {
      if (url.endsWith("/admin/v1/whoami")) return new Response(JSON.stringify(who), { status: 200 });
      if (url.includes("/admin/v1/entries/7")) return new Response(JSON.stringify(show), { status: 200 });
      if (url.includes("/admin/v1/entries")) return new Response(JSON.stringify({ entries: [entry(7, { state: "completed", stuck: false, expires_at: 1 })], next_before: null }), { status: 200 });
      return new Response(JSON.stringify(base.stats()), { status: 200 });
    }) as unknown as typeof fetch;
    const open = () => inBrowser(fake);
    let app = await open();
    expect(q("signed-in").textContent).toBe("vic · viewer");
    expect(q("operator-input")).toBeNull();
    await app.go("expiries");
    expect(q("action-purge").hasAttribute("disabled")).toBe(true);
    expect(q("action-purge").title).toContain("needs the admin role");
    await app.go("stuck");
    expect(q("bulk-release").hasAttribute("disabled")).toBe(true);
    await app.go("entry", 7);
    for (const a of ["resolve", "release", "replay", "reconcile", "purge"]) expect(q(`action-${a}`).hasAttribute("disabled")).toBe(true);
    await app.go("export");
    expect(q("action-export").hasAttribute("disabled")).toBe(true);
    expect(q("action-verify-ledger").hasAttribute("disabled")).toBe(true);
    expect(q("action-verify").hasAttribute("disabled")).toBe(true);
    expect(q("action-archive-list").hasAttribute("disabled"), "a viewer lists the archive").toBe(false);
    expect(q("action-archive-verify").hasAttribute("disabled")).toBe(true);
    // An operator resolves, but purges and exports no more than a viewer.
    who = { name: "olga", role: "operator", shared: false };
    app = await open();
    await app.go("entry", 7);
    expect(q("action-purge").hasAttribute("disabled")).toBe(true);
    // Completed: the ledger takes none of them, and the button says why.
    expect(q("action-release").hasAttribute("disabled")).toBe(true);
    expect(q("action-resolve").title).toBe("resolve needs another state");
    await app.go("stuck");
    expect(q("bulk-release").hasAttribute("disabled")).toBe(false);
    // The shared admin token names no one: the name to record is typed.
    who = { name: "admin", role: "admin", shared: true };
    app = await open();
    expect(q("signed-in").textContent).toBe("shared admin token");
    expect(q("operator-input")).toBeTruthy();
    await app.go("expiries");
    expect(q("action-purge").hasAttribute("disabled")).toBe(false);
  });
});
