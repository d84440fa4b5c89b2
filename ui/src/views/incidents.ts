// Incidents: duplicate suspects grouped by the call they repeat, and their review.
import type { Incident } from "../bindings/Incident";
import { clear, h } from "../dom";
import { isoTime } from "../format";
import { type Shell } from "../shell";
import { entryHeader, entryRow } from "./entries";

export async function incidents(app: Shell): Promise<void> {
  const [groups, loops] = await Promise.all([
    app.t.ops.incidents({ limit: 100 }),
    app.t.ops.log({ kind: "loop_suspect", limit: 50 }),
  ]);
  let openOnly = app.prefs.getItem("incidentsOpenOnly") === "1";
  const list = h("div", { testid: "incident-list" });
  const draw = () => {
    clear(list);
    const shown = groups.filter((g) => g.open || !openOnly);
    if (!shown.length) list.append(h("div", { class: "empty" }, openOnly && groups.length ? "Every incident is reviewed." : "No duplicate suspects."));
    for (const g of shown) list.append(incidentPanel(app, g));
  };
  const toggle = h("label", { class: "toggle" }, h("input", { testid: "incidents-open-only", attrs: { type: "checkbox", checked: openOnly }, on: { change: (e) => { openOnly = (e.target as HTMLInputElement).checked; app.prefs.setItem("incidentsOpenOnly", openOnly ? "1" : "0"); draw(); } } }), " open only");
  app.main.append(
    h("h1", null, "Incidents"),
    h("p", { class: "hint" }, "Duplicate suspects: the same effect (the same request, or the route's duplicate_on values such as customer, amount and currency) completed under different keys within the window — a customer charged twice. Newest first; mark one reviewed once you have dealt with it."),
    h("div", { class: "filters" }, toggle),
    list,
  );
  draw();
  app.main.append(h("h2", null, "Loop suspects"), h("p", { class: "hint" }, "An agent sent one request more often than its route's loop_guard allows."));
  if (!loops.events.length) app.main.append(h("div", { class: "empty" }, "No loop suspects."));
  else app.main.append(h("div", { class: "timeline", testid: "loop-suspects" }, h("div", { class: "row event head", testid: "list-header", attrs: { role: "row" } }, ...[["time", "when"], ["route", "route · scope"], ["who", "calls in the window, and what was done"]].map(([c, label]) => h("span", { class: c, attrs: { role: "columnheader" } }, label))), ...loops.events.map((ev) => h("div", { class: "row event" }, h("span", { class: "time" }, isoTime(ev.at)), h("span", { class: "route" }, `${ev.route} · ${ev.scope || "no scope"}`), h("span", { class: "who" }, loopText(ev.detail))))));
}

/** One incident: what it is about in the business's terms, its entries, its review. */
export function incidentPanel(app: Shell, g: Incident): HTMLElement {
  const review = h("button", { testid: "incident-review", attrs: app.gate("review_incident"), on: { click: () => void reviewIncident(app, g) } }, g.review && !g.open ? "Reviewed ✓" : "Mark reviewed…");
  const reopen = g.review && !g.open ? h("button", { testid: "incident-reopen", attrs: app.gate("reopen_incident"), on: { click: () => void reopenIncident(app, g) } }, "Reopen…") : null;
  return h(
    "div",
    { class: `panel incident${g.open ? "" : " reviewed"}`, testid: "incident", attrs: { "data-incident-id": g.id } },
    h("div", { class: "entry-head" }, h("h2", { testid: "incident-title" }, g.title), h("div", { class: "actions" }, review, reopen)),
    g.first_purged ? h("p", { class: "small", testid: "incident-first-purged" }, `first entry #${g.id} purged; its duplicates below still happened`) : null,
    g.review ? h("p", { class: "small", testid: "incident-reviewed" }, `${g.open ? "reviewed before its newest suspect" : "reviewed"} by ${g.review.operator}: ${g.review.reason} (${isoTime(g.review.at)})`) : null,
    entryHeader(false),
    ...g.entries.map((e) => entryRow(app, e, false, null)),
  );
}

export async function reviewIncident(app: Shell, g: Incident): Promise<void> {
  await app.action({
    title: `review incident ${g.id}`,
    preview: { action: "review", count: 1, ids: [g.id], keys: [g.title], destructive: false, skipped: [] },
    run: async (operator, reason) => {
      await app.t.ops.review_incident({ entry_id: g.id, operator, reason });
      return "review: done";
    },
  });
  await app.go("incidents");
}

export async function reopenIncident(app: Shell, g: Incident): Promise<void> {
  await app.action({
    title: `reopen incident ${g.id}`,
    preview: { action: "reopen", count: 1, ids: [g.id], keys: [g.title], destructive: false, skipped: [] },
    run: async (operator, reason) => {
      const withdrawn = await app.t.ops.reopen_incident({ entry_id: g.id, operator, reason });
      return `reopen: done (${withdrawn.operator}'s review withdrawn)`;
    },
  });
  await app.go("incidents");
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
