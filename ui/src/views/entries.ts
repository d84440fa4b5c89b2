// The lists of entries (Stuck, Collisions, Expiries, Search) and their bulk actions.
import type { EntryFilter } from "../bindings/EntryFilter";
import type { EntrySummary } from "../bindings/EntrySummary";
import type { BulkCmd } from "../bindings/BulkCmd";
import type { BulkKind } from "../bindings/BulkKind";
import type { BulkTarget } from "../bindings/BulkTarget";
import type { ResolveAs } from "../bindings/ResolveAs";
import { STATES } from "../bindings/values";
import { h } from "../dom";
import { isoTime, relative, routeLabel } from "../format";
import { VirtualList } from "../vlist";
import { type Shell, ROW, PAGE, searchFilter, subjectsText } from "../shell";
import { resolveFields } from "./entry";

export function entryRow(app: Shell, e: EntrySummary, selected: boolean, sel: Set<number> | null): HTMLElement {
  const now = Date.now();
  const check = sel
    ? h("input", { testid: "row-select", attrs: { type: "checkbox", checked: sel.has(e.id), "aria-label": `select ${e.key}` }, on: { click: (ev) => { ev.stopPropagation(); if ((ev.target as HTMLInputElement).checked) sel.add(e.id); else sel.delete(e.id); } } })
    : null;
  return h(
    "div",
    { class: `row entry${selected ? " selected" : ""}`, testid: "entry-row", attrs: { "data-entry-id": e.id }, on: { click: () => void app.go("entry", e.id) } },
    check,
    h("span", { class: "id" }, `${e.id}`),
    h("span", { class: `state s-${e.state}${e.stuck ? " stuck" : ""}` }, e.stuck ? "stuck" : e.state),
    // Cut to fit; the whole value on hover (and in the entry view).
    h("span", { class: "route", attrs: { title: `${routeLabel(e)}${e.effect === "destructive" ? " (destructive)" : ""}` } }, `${routeLabel(e)}${e.effect === "destructive" ? " ⚠" : ""}`),
    h("span", { class: "scope", attrs: { title: e.scope } }, e.scope || "—"),
    h("span", { class: "key", testid: "row-key", attrs: { title: e.key } }, e.key),
    h("span", { class: "subjects", testid: "row-subjects", attrs: { title: subjectsText(e.subjects, "=") } }, subjectsText(e.subjects)),
    h("span", { class: "age", title: isoTime(e.created_at) }, relative(e.created_at, now)),
    h("span", { class: "num", title: "attempts" }, `${e.attempts}×`),
    h("span", { class: e.duplicate_of !== null ? "err dup" : "err", testid: e.duplicate_of !== null ? "row-duplicate" : "row-note" }, e.duplicate_of !== null ? `⚠ duplicate of #${e.duplicate_of}` : e.expires_at && app.view === "expiries" ? `expires ${relative(e.expires_at, now)}` : e.last_error ?? (e.collisions ? `${e.collisions} collision(s)` : "")),
  );
}

export async function entryList(app: Shell, title: string, hint: string, base: Partial<EntryFilter>, bulk: ("resolve" | "release" | "replay" | "reconcile")[]): Promise<void> {
  const filter: EntryFilter = { state: null, stuck: false, collisions: false, expired: false, expiring_within: null, duplicates: false, route: null, scope: null, key: null, tool: null, subject: null, search: null, ...base };
  const sel = new Set<number>();
  const sort: Sort = { oldest: false };
  const list = new VirtualList<EntrySummary>(ROW, (e, _i, s) => entryRow(app, e, s, bulk.length ? sel : null), async (last) => entryPage(app, filter, last, sort.oldest), `${app.view}-list`);
  app.list = list;
  const search = h("input", { testid: "filter-input", attrs: { placeholder: "filter: a key or a customer's id, or route:, scope:, tool:, customer: … (exact)" }, on: { change: (e) => { Object.assign(filter, searchFilter((e.target as HTMLInputElement).value)); sel.clear(); void list.reset(); } } });
  const bar = h("div", { class: "filters" }, search);
  for (const a of bulk) {
    bar.append(h("button", { testid: `bulk-${a}`, attrs: app.gate("bulk"), on: { click: () => void bulkAction(app, a, filter, sel, list) } }, `${a[0].toUpperCase()}${a.slice(1)} selected (or all matching)`));
  }
  app.main.append(h("h1", null, title), h("p", { class: "hint" }, hint), bar, sortedHeader(bulk.length > 0, sort, list), list.el);
  await list.reset();
}

/** The order a list of entries is read in, by id (the order they came in): newest first unless
 * `oldest`. The ledger pages either way. */
export interface Sort {
  oldest: boolean;
}

/** [`entryHeader`] whose id and created columns flip `sort` and read `list` again. */
function sortedHeader(selectable: boolean, sort: Sort, list: VirtualList<EntrySummary>): HTMLElement {
  let head = entryHeader(selectable, sort, () => {
    sort.oldest = !sort.oldest;
    const next = sortedHeader(selectable, sort, list);
    head.replaceWith(next);
    head = next;
    void list.reset();
  });
  return head;
}

/** The column names above a list of entries, in the order of [`entryRow`]'s cells; with `sort`,
 * the id and created columns show the order and `flip` it when clicked. */
export function entryHeader(selectable: boolean, sort?: Sort, flip?: () => void): HTMLElement {
  const cells: [string, string, string][] = [
    ["id", "id", "the entry's id"],
    ["state", "state", `${STATES.join(", ")}; stuck when held for an operator`],
    ["route", "route", "the route (· the MCP tool); ⚠ a destructive one"],
    ["scope", "scope", "the scope: the agent or tenant the key belongs to"],
    ["key", "idempotency key", "the idempotency key"],
    ["subjects", "subjects", "the business subjects: customer, amount, …"],
    ["age", "created", "when the first call came"],
    ["num", "×", "attempts upstream"],
    ["err", "note", "the last error, a duplicate or an expiry"],
  ];
  const cell = ([c, label, title]: [string, string, string]) => {
    if (!sort || !flip || (c !== "id" && c !== "age")) return h("span", { class: c, attrs: { role: "columnheader", title } }, label);
    const order = sort.oldest ? "oldest first" : "newest first";
    return h("span", {
      class: `${c} sortable`,
      testid: `sort-${c}`,
      attrs: { role: "columnheader", tabindex: 0, "aria-sort": sort.oldest ? "ascending" : "descending", title: `${title}; ${order} — click for ${sort.oldest ? "newest" : "oldest"} first` },
      on: { click: flip, keydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); e.stopPropagation(); flip(); } } },
    }, `${label} ${sort.oldest ? "▲" : "▼"}`);
  };
  return h("div", { class: "row entry head", testid: "list-header", attrs: { role: "row" } }, ...(selectable ? [h("span", { class: "check" })] : []), ...cells.map(cell));
}

export async function entryPage(app: Shell, filter: EntryFilter, last: EntrySummary | undefined, oldest = false): Promise<{ items: EntrySummary[]; more: boolean }> {
  const { expiring_within, ...rest } = filter;
  const from = last ? last.id : null;
  const p = await app.t.ops.entries({ ...rest, expiring_within_ms: expiring_within, before: oldest ? null : from, after: oldest ? from : null, oldest_first: oldest, limit: PAGE });
  return { items: p.entries, more: (oldest ? p.next_after : p.next_before) !== null };
}

export async function bulkAction(app: Shell, action: "resolve" | "release" | "replay" | "reconcile", filter: EntryFilter, sel: Set<number>, list: VirtualList<EntrySummary>): Promise<void> {
  try {
    // Which entries, how many and whether any is destructive: the operations layer decides.
    const kind: BulkKind = action === "release" ? "resolve" : action;
    const target: BulkTarget = { filter, ids: sel.size ? [...sel] : null };
    const preview = await app.t.ops.preview_bulk({ action: kind, as: action === "release" ? "released" : null, target });
    const outcome = action === "resolve" ? resolveFields() : null;
    await app.action({
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
        return app.runJob("bulk", preview.count, progress, stop, (job) => app.t.ops.bulk(cmd, job), {
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
    app.error(e);
  }
}

export async function expiries(app: Shell): Promise<void> {
  const base: EntryFilter = { state: null, stuck: false, collisions: false, expired: true, expiring_within: null, duplicates: false, route: null, scope: null, key: null, tool: null, subject: null, search: null };
  let filter = { ...base };
  const sort: Sort = { oldest: false };
  const list = new VirtualList<EntrySummary>(ROW, (e, _i, s) => entryRow(app, e, s, null), async (last) => entryPage(app, filter, last, sort.oldest), "expiries-list");
  app.list = list;
  const mode = h("select", { testid: "expiry-mode", on: { change: (e) => { const soon = (e.target as HTMLSelectElement).value === "soon"; filter = { ...filter, expired: !soon, expiring_within: soon ? 3_600_000 : null }; void list.reset(); } } }, h("option", { attrs: { value: "expired" } }, "expired"), h("option", { attrs: { value: "soon" } }, "expiring within 1h"));
  const search = h("input", { testid: "filter-input", attrs: { placeholder: "route (exact), e.g. charges" }, on: { change: (e) => { filter = { ...filter, route: (e.target as HTMLInputElement).value.trim() || null }; void list.reset(); } } });
  const purgeAll = h("button", {
    testid: "action-purge",
    attrs: app.gate("purge"),
    on: {
      click: async () => {
        if (!filter.expired) return app.error({ code: "invalid-argument", message: "only expired entries are purged; switch to 'expired'" });
        const target = { target: "expired" as const, filter: { ...filter, expired: true } };
        const preview = await app.t.ops.preview_purge(target).catch((e) => (app.error(e), null));
        if (!preview) return;
        await app.action({
          title: "Purge every expired entry matching the filter",
          preview,
          run: (operator, reason, progress, stop) =>
            app.runJob("purge", preview.count, progress, stop, (job) => app.t.ops.purge({ ...target, operator, reason, confirm_destructive: preview.destructive }, job), {
              stopped: "the entries purged before Stop stay purged (the log lists them); the rest are as they were",
              done: (r) => `purged ${r.purged.length} entr${r.purged.length === 1 ? "y" : "ies"}${r.cancelled ? ` of ${preview.count}: stopped; the rest are as they were` : ""}`,
            }),
        });
        await list.reset();
      },
    },
  }, "Purge all matching");
  app.main.append(h("h1", null, "Expiries"), h("p", { class: "hint" }, "Completed, released or failed entries past their TTL are no longer replayed; their keys may run again. Purging removes their stored requests and responses — the log keeps their events."), h("div", { class: "filters" }, mode, search, purgeAll), sortedHeader(false, sort, list), list.el);
  await list.reset();
}
