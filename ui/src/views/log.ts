// The Log: the append-only event stream, filtered, newest first, live.
import type { Event } from "../bindings/Event";
import type { EventKind } from "../bindings/EventKind";
import type { LogRequest } from "../bindings/LogRequest";
import { EVENT_KINDS } from "../bindings/values";
import { h } from "../dom";
import { fromLocalInput, isoTime } from "../format";
import { VirtualList } from "../vlist";
import { type Shell, ROW, PAGE } from "../shell";

/** The log's column names, in the order of its rows' cells. */
const LOG_COLUMNS: [string, string][] = [["seq", "seq"], ["time", "time"], ["kind", "kind"], ["route", "route · scope"], ["key", "idempotency key"], ["who", "operator: reason, or detail"]];

export async function logView(app: Shell): Promise<void> {
  const f: LogRequest = { entry_id: null, route: null, scope: null, key: null, kind: null, operator: null, since: null, until: null, search: null };
  const input = (field: keyof LogRequest, placeholder: string, testid?: string) =>
    h("input", { testid, attrs: { placeholder, "aria-label": placeholder }, on: { change: (e) => { const v = (e.target as HTMLInputElement).value.trim(); (f as Record<string, unknown>)[field] = v === "" ? null : v; void list.reset(); } } });
  const time = (field: "since" | "until", label: string) =>
    h("label", null, label, h("input", { testid: `log-${field}`, attrs: { type: "datetime-local" }, on: { change: (e) => { f[field] = fromLocalInput((e.target as HTMLInputElement).value); void list.reset(); } } }));
  const kinds = ["", ...EVENT_KINDS];
  const kind = h("select", { testid: "log-kind", on: { change: (e) => { const v = (e.target as HTMLSelectElement).value; f.kind = (v || null) as EventKind | null; void list.reset(); } } }, ...kinds.map((k) => h("option", { attrs: { value: k } }, k || "any kind")));
  const live = h("input", { testid: "log-live", attrs: { type: "checkbox", checked: true } });
  const list = new VirtualList<Event>(
    ROW,
    (ev, _i, sel) =>
      h(
        "div",
        { class: `row event${sel ? " selected" : ""}`, testid: "entry-row", attrs: { "data-entry-id": ev.entry_id ?? "", "data-seq": ev.seq }, on: { click: () => ev.entry_id && void app.go("entry", ev.entry_id) } },
        h("span", { class: "seq" }, `#${ev.seq}`),
        h("span", { class: "time" }, isoTime(ev.at)),
        h("span", { class: `kind k-${ev.kind}` }, ev.kind),
        // Cut to fit; the whole value on hover.
        h("span", { class: "route", attrs: { title: `${ev.route}${ev.scope ? ` · ${ev.scope}` : ""}` } }, `${ev.route}${ev.scope ? ` · ${ev.scope}` : ""}`),
        h("span", { class: "key", attrs: { title: ev.key } }, ev.key),
        h("span", { class: "who", attrs: { title: ev.operator ? `${ev.operator}: ${ev.reason ?? ""}` : ev.detail } }, ev.operator ? `${ev.operator}: ${ev.reason ?? ""}` : ev.detail),
      ),
    async (last) => {
      const p = await app.t.ops.log({ ...f, before: last ? last.seq : null, limit: PAGE });
      return { items: p.events, more: p.next_before !== null };
    },
    "log-list",
  );
  app.list = list;
  app.main.append(
    h("h1", null, "Log"),
    h("p", { class: "hint" }, "The append-only, hash-chained event stream, newest first. Filters apply on Enter; / focuses search; j/k and Enter open an entry."),
    h("div", { class: "filters" }, input("search", "search key, route, reason…", "filter-input"), input("route", "route"), input("scope", "scope"), input("key", "key"), kind, input("operator", "operator", "log-operator"), time("since", "since"), time("until", "until"), h("label", null, live, "live")),
    h("div", { class: "row event head", testid: "list-header", attrs: { role: "row" } }, ...LOG_COLUMNS.map(([c, label]) => h("span", { class: c, attrs: { role: "columnheader" } }, label))),
    list.el,
  );
  await list.reset();
  app.timers.push(
    window.setInterval(async () => {
      if (!live.checked || app.view !== "log") return;
      const head = list.items[0]?.seq ?? 0;
      const page = await app.t.ops.log({ ...f, limit: PAGE }).catch(() => null);
      if (page) list.prepend(page.events.filter((e) => e.seq > head));
    }, 2000),
  );
}
