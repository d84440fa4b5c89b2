// Approvals: the inbox of calls held for an operator's decision before they run.
import type { Decision } from "../bindings/Decision";
import type { EntryDetail } from "../bindings/EntryDetail";
import type { HeldCall } from "../bindings/HeldCall";
import { clear, h } from "../dom";
import { bodyText, isoTime, relative } from "../format";
import { type Shell } from "../shell";

export async function approvals(app: Shell): Promise<void> {
  let openOnly = app.prefs.getItem("approvalsAll") !== "1";
  const list = h("div", { testid: "approval-list" });
  let shown: HeldCall[] = [];
  const draw = async () => {
    shown = await app.t.ops.approvals({ open: openOnly, before: null, limit: 200 });
    clear(list);
    if (!shown.length) list.append(h("div", { class: "empty" }, openOnly ? "Nothing waits for a decision." : "No call was held for approval."));
    for (const e of shown) list.append(approvalPanel(app, e, e.decision));
  };
  const toggle = h("label", { class: "toggle" }, h("input", { testid: "approvals-open-only", attrs: { type: "checkbox", checked: openOnly }, on: { change: (e) => { openOnly = (e.target as HTMLInputElement).checked; app.prefs.setItem("approvalsAll", openOnly ? "0" : "1"); void draw(); } } }), " waiting only");
  app.main.append(
    h("h1", null, "Approvals"),
    h("p", { class: "hint" }, "Calls a route's approval policy held before they ran: nothing was sent upstream. Approve one (as many distinct operators as its policy needs) and the server sends it once; reject it and it never runs. Keys: a approves, r rejects the first one waiting that you may decide on."),
    h("div", { class: "filters" }, toggle),
    list,
  );
  await draw();
  app.viewKeys = (k) => {
    if (k !== "a" && k !== "r") return false;
    const first = shown.find((e) => (k === "a" ? e.decision.approve : e.decision.reject) === null);
    if (!first) return false;
    void decide(app, first, k === "a");
    return true;
  };
}

/** One held call: what it is, who asked, the policy it matched, the request (unless `request`
 * is false: the entry's own view shows it), the time left; Approve and Reject as `decision`
 * (the operations' judgement of the one who asks) allows, with why not. */
export function approvalPanel(app: Shell, e: EntryDetail, decision: Decision | null, request = true): HTMLElement {
  const a = e.approval;
  const waiting = a !== null && a.end === null;
  const standing = a === null ? "" : a.end === null ? `${a.approved_by.length} of ${a.needed} approvals · expires ${relative(a.expires_at, Date.now())} (${isoTime(a.expires_at)})` : `${a.end} ${isoTime(a.ended_at)}`;
  const gate = (verb: "approve" | "reject") => {
    const why = decision === null ? `entry ${e.id} was never held for approval` : decision[verb];
    const g = app.gate(verb, why === null);
    return why !== null && g.title === undefined ? { ...g, title: why } : g;
  };
  const approve = h("button", { class: "primary", testid: "approval-approve", attrs: gate("approve"), on: { click: () => void decide(app, e, true) } }, "Approve…");
  const reject = h("button", { class: "danger", testid: "approval-reject", attrs: gate("reject"), on: { click: () => void decide(app, e, false) } }, "Reject…");
  const req = request ? e.request : null;
  return h(
    "div",
    { class: `panel approval${waiting ? "" : " decided"}`, testid: "approval", attrs: { "data-entry-id": e.id } },
    h("div", { class: "entry-head" }, h("h2", { testid: "approval-title" }, e.headline), h("div", { class: "actions" }, approve, reject)),
    h("p", { class: "small", testid: "approval-standing" }, standing),
    waiting && decision?.approve ? h("p", { class: "small", testid: "approval-not-yours" }, `You may not approve it: ${decision.approve}`) : null,
    h("p", { class: "small" }, `entry #${e.id} · key ${e.key} · asked by ${e.scope || "a client with no scope"} · ${isoTime(e.created_at)}`),
    a ? h("p", { class: "small", testid: "approval-policy" }, `policy ${a.policy}${a.approvers ? ` · approvers ${a.approvers.join(", ")}` : ""}${a.approved_by.length ? ` · approved by ${a.approved_by.join(", ")}` : ""}`) : null,
    e.resolved_by && a?.end === "rejected" ? h("p", { class: "small", testid: "approval-rejected" }, `rejected by ${e.resolved_by}: ${e.resolution_reason ?? ""}`) : null,
    req ? h("pre", { class: "mono", testid: "approval-request" }, `${req.method} ${req.path}\n\n${bodyText(req.body, e.id)}`) : null,
  );
}

/** Approves or rejects one held call, through the action dialog (a reason, the operator). */
export async function decide(app: Shell, e: EntryDetail, approve: boolean): Promise<void> {
  const verb = approve ? "approve" : "reject";
  await app.action({
    title: `${verb} entry ${e.id}`,
    preview: { action: verb, count: 1, ids: [e.id], keys: [e.key], destructive: false, skipped: [] },
    run: async (operator, reason) => {
      const req = { entry_id: e.id, operator, reason, fingerprint: e.fingerprint };
      const a = approve ? await app.t.ops.approve(req) : await app.t.ops.reject(req);
      return a.end === null ? `approved: ${a.approved_by.length} of ${a.needed}` : `${verb}: done (${a.end})`;
    },
  });
  await app.go("approvals");
}
