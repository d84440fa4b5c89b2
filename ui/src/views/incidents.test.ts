// The Incidents view: incidents titled in the customer's terms, reviewed and reopened with a
// reason, loop suspects, and incidents whose first entry was purged.
import { base, entry, q, setup, tick } from "../test-support";

describe("incidents", () => {
  it("titles an incident as the operations do and marks it reviewed with a reason", async () => {
    const subjects: [string, string][] = [["amount", "49.99"], ["currency", "usd"], ["customer", "cus_123"]];
    const a = entry(3, { state: "completed", stuck: false, scope: "billing-01", subjects, created_at: 1_800_000_000_000 });
    const b = entry(4, { state: "completed", stuck: false, scope: "billing-02", subjects, duplicate_of: 3, created_at: 1_800_000_014_000 });
    const incident = { id: 3, route: "charges", scope: "billing-01", fingerprint: "ab", subjects, first_purged: false, entries: [a, b], review: null, open: true, title: "cus_123 · charges · 2 × 49.99 USD · agents billing-01, billing-02 · 14 s apart" };
    const { app, calls, prefs } = setup({
      ...base,
      incidents: () => [incident],
      log: () => ({ events: [], next_before: null }),
      review_incident: () => ({ operator: "dana", reason: "refunded", at: 1, through: 4 }),
    });
    prefs.set("operator", "dana");
    await app.start();
    await app.go("incidents");
    expect(q("incident-title").textContent).toBe("cus_123 · charges · 2 × 49.99 USD · agents billing-01, billing-02 · 14 s apart");
    // Its entries under the lists' column names.
    const head = [...q("incident").querySelectorAll('[data-testid="list-header"] [role="columnheader"]')].map((c) => c.textContent);
    expect(head).toEqual(["id", "state", "route", "scope", "idempotency key", "subjects", "created", "×", "note"]);
    q("incident-review").click();
    await tick();
    (q("reason-input") as HTMLTextAreaElement).value = "refunded the second";
    q("confirm-button").click();
    await tick();
    expect(calls.find(([c]) => c === "review_incident")?.[1]).toMatchObject({ entry_id: 3, operator: "dana", reason: "refunded the second" });
  });

  it("reopens a reviewed incident with a reason, and offers no reopen for an open one", async () => {
    const subjects: [string, string][] = [["customer", "cus_7"]];
    const a = entry(5, { state: "completed", stuck: false, subjects });
    const b = entry(6, { state: "completed", stuck: false, subjects, duplicate_of: 5 });
    const review = { operator: "dana", reason: "refunded", at: 1, through: 6 };
    const reviewed = { id: 5, route: "charges", scope: "", fingerprint: "ab", subjects, first_purged: false, entries: [a, b], review, open: false, title: "cus_7 · charges · 2 calls" };
    const open = { ...reviewed, id: 7, review: null, open: true };
    const { app, calls, prefs } = setup({ ...base, incidents: () => [reviewed, open], log: () => ({ events: [], next_before: null }), reopen_incident: () => review });
    prefs.set("operator", "erin");
    await app.start();
    await app.go("incidents");
    expect(document.querySelectorAll('[data-testid="incident-reopen"]').length).toBe(1);
    q("incident-reopen").click();
    await tick();
    (q("reason-input") as HTMLTextAreaElement).value = "the refund bounced";
    q("confirm-button").click();
    await tick();
    expect(calls.find(([c]) => c === "reopen_incident")?.[1]).toMatchObject({ entry_id: 5, operator: "erin", reason: "the refund bounced" });
  });

  it("lists loop suspects under their column names, each as what the guard saw and did", async () => {
    const ev = { seq: 9, at: 1_800_000_000_000, kind: "loop_suspect", entry_id: null, route: "charges", scope: "agent-9", key: "k", operator: null, reason: null,
      detail: JSON.stringify({ calls: 21, max: 20, window_ms: 60_000, action: "reject", tool: null }), payload_digest: null, prev_hash: "p", hash: "h" };
    const { app, calls } = setup({ ...base, incidents: () => [], log: () => ({ events: [ev], next_before: null }) });
    await app.start();
    await app.go("incidents");
    expect(calls.find(([c]) => c === "log")?.[1]).toMatchObject({ kind: "loop_suspect" });
    const list = q("loop-suspects");
    expect([...list.querySelectorAll('[role="columnheader"]')].map((c) => c.textContent)).toEqual(["when", "route · scope", "calls in the window, and what was done"]);
    expect(list.querySelector(".row.event:not(.head) .who")?.textContent).toBe("21 calls in 60 s (max 20) · refused");
  });

  it("keeps an incident whose first entry was purged, titled from its duplicates, and says so", async () => {
    const subjects: [string, string][] = [["amount", "49.99"], ["currency", "usd"], ["customer", "cus_9"]];
    const b = entry(4, { state: "completed", stuck: false, scope: "billing-02", subjects, duplicate_of: 3, created_at: 1_800_000_014_000 });
    const incident = { id: 3, route: "charges", scope: "billing-02", fingerprint: "ab", subjects, first_purged: true, entries: [b], review: null, open: true, title: "cus_9 · charges · 2 × 49.99 USD · agent billing-02" };
    const { app } = setup({ ...base, incidents: () => [incident], log: () => ({ events: [], next_before: null }) });
    await app.start();
    await app.go("incidents");
    expect(q("incident-title").textContent).toContain("cus_9 · charges");
    expect(q("incident-first-purged").textContent).toBe("first entry #3 purged; its duplicates below still happened");
  });
});
