// One entry: its request, response and timeline, and the operator actions on it.
import type { Action } from "../bindings/Action";
import type { Code } from "../bindings/Code";
import type { EntryView } from "../bindings/EntryView";
import type { ErrorBody } from "../bindings/ErrorBody";
import type { ResolveAs } from "../bindings/ResolveAs";
import { h } from "../dom";
import { bodyText, curlFor, DEFAULT_PROXY, isoTime, proxyBase, relative, routeLabel } from "../format";
import { type Shell, subjectsText } from "../shell";
import { approvalPanel } from "./approvals";

export async function entryView(app: Shell, id: number): Promise<void> {
  app.lastEntry = id;
  const v: EntryView = await app.t.ops.show({ entry_id: id });
  const e = v.entry;
  const now = Date.now();
  const kv = (k: string, val: string | number | null | undefined) => h("div", { class: "kv" }, h("span", null, k), h("span", { class: "mono" }, val === null || val === undefined || val === "" ? "—" : String(val)));
  // Which actions the entry's state takes, and why not: the ledger's rule, as `show` reports it.
  const act = (name: Action, label: string) => {
    const standing = v.actions.find((a) => a.action === name);
    const refused = standing ? standing.refused : `${name} is not offered on this entry`;
    const gate = app.gate(name === "release" ? "resolve" : name, refused === null);
    return h("button", { testid: `action-${name}`, attrs: refused !== null && gate.title === undefined ? { ...gate, title: refused } : gate, on: { click: () => void entryAction(app, name, e.id) } }, label);
  };
  const header = h(
    "div",
    { class: "entry-head" },
    h("h1", null, h("span", { class: `state s-${e.state}${e.stuck ? " stuck" : ""}` }, e.stuck ? "stuck" : e.state), ` ${routeLabel(e)} · ${e.key}`),
    h("div", { class: "actions" }, act("resolve", "Resolve…"), act("release", "Release…"), act("replay", "Replay upstream…"), act("reconcile", "Reconcile…"), act("purge", "Purge…")),
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
  app.main.append(header, facts);
  if (e.approval) app.main.append(h("h2", null, "Approval"), approvalPanel(app, e, v.decision, false));
  if (v.call) {
    const c = v.call;
    const result = c.error ? `error ${JSON.stringify(c.error)}` : `${c.is_error ? "isError · " : ""}${c.result_text ?? "—"}`;
    app.main.append(
      h("h2", null, `Call · ${c.label}`),
      h("div", { class: "facts", testid: "tool-call" }, kv("arguments", JSON.stringify(c.arguments)), kv("result", result), kv("structured", c.structured === null ? null : JSON.stringify(c.structured))),
    );
  }
  if (e.request) {
    // Through the proxy this console runs or is served by; else idemgate's default address.
    const st = await app.t.proxyStatus().catch(() => null);
    const proxy = proxyBase(st?.running ? st.proxy_addr : null, location.hostname);
    const curl = curlFor(e.request, proxy.base);
    const copied = h("span", { class: "hint", testid: "curl-hint" }, proxy.known ? "" : ` ${DEFAULT_PROXY} is idemgate's default address: no proxy is running in this console`);
    app.main.append(
      h("h2", null, `Request · ${e.request.method} ${e.request.path}`),
      h("pre", { testid: "request-body" }, e.request.headers.map(([n, val]) => `${n}: ${val}`).join("\n"), "\n\n", bodyText(e.request.body, e.id)),
      h("div", { class: "row" }, h("button", { testid: "copy-curl", on: { click: async () => { await navigator.clipboard?.writeText(curl).catch(() => {}); copied.textContent = " copied"; } } }, "Copy as curl"), copied),
      h("pre", { class: "small", testid: "curl" }, curl),
    );
  }
  if (e.response) {
    app.main.append(h("h2", null, `Response · ${e.response.status}`), h("pre", { testid: "response" }, e.response.headers.map(([n, val]) => `${n}: ${val}`).join("\n"), "\n\n", bodyText(e.response.body, e.id)));
  }
  e.collision_requests.forEach((c, i) => {
    const diff = v.collision_diffs[i] ?? [];
    app.main.append(
      h("h2", null, `Rejected request (key reuse) · ${isoTime(c.at)}`),
      h(
        "table",
        { class: "diff", testid: "collision-diff" },
        h("thead", null, h("tr", null, h("th", null, "field"), h("th", null, "stored (executed)"), h("th", null, "rejected"))),
        h("tbody", null, ...diff.map((d) => h("tr", null, h("td", { class: "mono" }, d.field), h("td", { class: `mono ${d.stored === null ? "missing" : "old"}` }, d.stored ?? "(absent)"), h("td", { class: `mono ${d.rejected === null ? "missing" : "new"}` }, d.rejected ?? "(absent)")))),
      ),
    );
  });
  const proof = h("div", { testid: "proof-panel" });
  const prove = (seq: number) => h("button", { class: "small", testid: `prove-${seq}`, attrs: { ...app.gate("prove", true), title: "Proof for the auditor: this event is in the log" }, on: { click: () => void showProof(app, proof, seq) } }, "proof");
  app.main.append(
    h("h2", null, "Timeline"),
    h("div", { class: "timeline", testid: "timeline" }, ...v.timeline.map((ev) => h("div", { class: "row event" }, h("span", { class: "seq" }, `#${ev.seq}`), h("span", { class: "time" }, isoTime(ev.at)), h("span", { class: `kind k-${ev.kind}` }, ev.kind), h("span", { class: "who" }, ev.operator ? `${ev.operator}: ${ev.reason ?? ""}` : ev.detail), prove(ev.seq)))),
    proof,
  );
}

/** The proof that event `seq` is in the log, for an auditor: a C2SP tlog-proof under a freshly
 * signed checkpoint, to save as a file and check with the log's public key alone. */
async function showProof(app: Shell, panel: HTMLElement, seq: number): Promise<void> {
  try {
    const p = await app.t.ops.prove({ seq });
    const file = `event-${seq}.tlog-proof`;
    const copied = h("span", { class: "hint" });
    panel.replaceChildren(
      h("h2", null, `Proof for the auditor · event #${seq}`),
      h("p", { class: "hint", testid: "proof-summary" }, `Leaf ${p.index} of the log's tree of ${p.size} events (root ${p.root}). Save it as ${file}; anyone with the log's public key checks it, with nothing else: idemgate verify --proof ${file} --public-key LOG.pub`),
      h("div", { class: "row" }, h("button", { testid: "copy-proof", on: { click: async () => { await navigator.clipboard?.writeText(p.proof).catch(() => {}); copied.textContent = " copied"; } } }, "Copy proof"), copied),
      h("pre", { class: "small", testid: "proof" }, p.proof),
    );
  } catch (e) {
    app.error(e);
  }
}

export async function entryAction(app: Shell, name: string, id: number): Promise<void> {
  try {
    const preview = name === "purge" ? await app.t.ops.preview_purge({ target: "ids", ids: [id] }) : await app.t.ops.preview_resolve({ entry_id: id, as: name === "release" ? "released" : null });
    const fields = name === "resolve" ? resolveFields() : null;
    await app.action({
      title: `${name} entry ${id}`,
      preview: { ...preview, action: name },
      fields: fields?.el,
      run: async (operator, reason) => {
        await perform(app, name, id, operator, reason, preview.destructive, fields?.value());
        return `${name}: done`;
      },
    });
    if (name === "purge") await app.go("expiries");
    else await app.go("entry", id);
  } catch (e) {
    app.error(e);
  }
}

export async function perform(app: Shell, action: string, id: number, operator: string, reason: string, confirm: boolean, outcome?: { as: ResolveAs; external_ref: string | null; body: string | null; status: number }): Promise<void> {
  const cmd = { operator, reason, confirm_destructive: confirm };
  if (action === "release") {
    await app.t.ops.resolve({ entry_id: id, as: "released", response: null, external_ref: null, ...cmd });
  } else if (action === "resolve") {
    const o = outcome ?? { as: "completed" as ResolveAs, external_ref: null, body: null, status: 200 };
    // The content type is ops's to choose (JSON when the body is, else plain text).
    const response = o.body ? { status: o.status, headers: [] as [string, string][], body: o.body } : null;
    await app.t.ops.resolve({ entry_id: id, as: o.as, response, external_ref: o.external_ref, ...cmd });
  } else if (action === "replay") {
    const r = await app.t.ops.replay({ entry_id: id, ...cmd });
    if (r.problem) throw { code: ((r.problem as Record<string, unknown>).code ?? "upstream-error") as Code, message: String((r.problem as Record<string, unknown>).detail ?? "") } satisfies ErrorBody;
  } else if (action === "reconcile") {
    await app.t.ops.reconcile({ entry_id: id, ...cmd });
  } else if (action === "purge") {
    await app.t.ops.purge({ target: "ids", ids: [id], ...cmd }, `purge-${id}-${Date.now()}`);
  }
}

/** The inputs of a resolve: as what, with which response or external reference. */
export function resolveFields(): { el: HTMLElement; value: () => { as: ResolveAs; external_ref: string | null; body: string | null; status: number } } {
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
