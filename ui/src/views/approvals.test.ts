// The Approvals view: the inbox of held calls, approved and rejected with a reason (buttons and
// the a and r keys), and the badge that counts what waits.
import { actions, base, entry, q, setup, tick, until } from "../test-support";

const held = (id: number, end: "approved" | "rejected" | null = null) => ({
  ...entry(id, { state: end === "rejected" ? "failed" : "awaiting_approval", stuck: false, route: "refunds", subjects: [["amount", "60000"], ["currency", "usd"], ["customer", "cus_9"]] as [string, string][] }),
  fingerprint: `fp-${id}`,
  headline: "cus_9 · refunds · 60000 USD",
  lease_owner: null,
  request: { method: "POST", path: "/v1/refunds", headers: [], body: '{"amount":60000,"customer":"cus_9"}' },
  response: null, last_replay_at: null, completed_at: null, resolved_by: null, resolution_reason: null, external_ref: null, collision_requests: [],
  approval: { policy: "refunds", policy_hash: "h", needed: 2, approvers: null, approved_by: end ? ["olga", "oscar"] : ["olga"], expires_at: Date.now() + 3_600_000, end, ended_at: end ? 1 : null },
  decision: end ? { approve: `entry ${id} is decided`, reject: `entry ${id} is decided` } : { approve: null, reject: null },
});

describe("approvals", () => {
  // First in the file: a key reaches every console the file's tests made, so this test's must be
  // the only one.
  it("rejects the first waiting call with r, and lists decided ones on request", async () => {
    const { app, calls, prefs } = setup({
      ...base,
      approvals: (a) => (a.open ? [held(8)] : [held(8), held(7, "rejected")]),
      reject: () => ({ ...held(8).approval, end: "rejected" }),
    });
    prefs.set("operator", "erin");
    await app.start();
    await app.go("approvals");
    document.body.dispatchEvent(new KeyboardEvent("keydown", { key: "r", bubbles: true }));
    await tick();
    expect(q("action-dialog").querySelector("h2")?.textContent).toBe("reject entry 8");
    (q("reason-input") as HTMLTextAreaElement).value = "not this customer";
    q("confirm-button").click();
    await until(() => calls.some(([c]) => c === "reject"));
    expect(calls.find(([c]) => c === "reject")?.[1]).toMatchObject({ entry_id: 8, operator: "erin", reason: "not this customer" });
    q("cancel-button").click();
    await tick();
    const all = q("approvals-open-only") as HTMLInputElement;
    all.checked = false;
    all.dispatchEvent(new Event("change"));
    await until(() => document.querySelectorAll('[data-testid="approval"]').length === 2);
    const decided = document.querySelectorAll('[data-testid="approval"]')[1] as HTMLElement;
    expect(decided.querySelector('[data-testid="approval-approve"]')?.hasAttribute("disabled")).toBe(true);
  });
  it("shows a held call in the business's terms and approves it with a reason", async () => {
    const { app, calls, prefs } = setup({
      ...base,
      approvals: (a) => (a.open ? [held(8)] : [held(8), held(7, "rejected")]),
      approve: () => ({ ...held(8).approval, approved_by: ["olga", "dana"], end: "approved" }),
    });
    prefs.set("operator", "dana");
    await app.start();
    await until(() => q("approvals-badge")?.textContent === "1");
    expect(q("approvals-badge").textContent).toBe("1");
    await app.go("approvals");
    expect(q("approval-title").textContent).toBe("cus_9 · refunds · 60000 USD");
    expect(q("approval-standing").textContent).toMatch(/^1 of 2 approvals · expires in (1h 0m|59m) /);
    expect(q("approval-request").textContent).toContain('"amount": 60000');
    q("approval-approve").click();
    await tick();
    (q("reason-input") as HTMLTextAreaElement).value = "agreed on the phone";
    q("confirm-button").click();
    await until(() => calls.some(([c]) => c === "approve"));
    expect(calls.find(([c]) => c === "approve")?.[1]).toMatchObject({ entry_id: 8, operator: "dana", reason: "agreed on the phone", fingerprint: "fp-8" });
  });
  it("shows a held call's approval on its entry, and approves it there", async () => {
    const { app, calls, prefs } = setup({
      ...base,
      show: () => ({ entry: held(8), timeline: [], collision_diffs: [], call: null, actions: actions("resolve", "release", "replay", "reconcile", "purge"), decision: held(8).decision }),
      approve: () => ({ ...held(8).approval, approved_by: ["olga", "dana"], end: "approved" }),
      approvals: () => [held(8)],
    });
    prefs.set("operator", "dana");
    await app.start();
    await app.go("entry", 8);
    expect(q("approval-standing").textContent).toMatch(/^1 of 2 approvals · expires in /);
    expect(q("approval-policy").textContent).toBe("policy refunds · approved by olga");
    // The request is shown once, in the entry's own section.
    expect(q("approval-request")).toBeNull();
    expect(q("request-body")).toBeTruthy();
    // Held, it is its approvers' alone: each action is off, and says why.
    expect(q("action-purge").hasAttribute("disabled")).toBe(true);
    expect(q("action-purge").title).toBe("purge needs another state");
    q("approval-approve").click();
    await tick();
    (q("reason-input") as HTMLTextAreaElement).value = "checked with the customer";
    q("confirm-button").click();
    await until(() => calls.some(([c]) => c === "approve"));
    expect(calls.find(([c]) => c === "approve")?.[1]).toMatchObject({ entry_id: 8, operator: "dana", fingerprint: "fp-8" });
  });
  it("offers to approve only what the operations say the one who asks may", async () => {
    const mine = { ...held(9), decision: { approve: "ada already approved entry 9; another operator must", reject: null } };
    const { app, calls } = setup({ ...base, approvals: () => [mine, held(8)] });
    await app.start();
    await app.go("approvals");
    const [first, second] = document.querySelectorAll('[data-testid="approval"]') as NodeListOf<HTMLElement>;
    const approve = first.querySelector('[data-testid="approval-approve"]') as HTMLButtonElement;
    expect(approve.disabled).toBe(true);
    expect(approve.title).toBe("ada already approved entry 9; another operator must");
    expect((first.querySelector('[data-testid="approval-reject"]') as HTMLButtonElement).disabled).toBe(false);
    expect(first.querySelector('[data-testid="approval-not-yours"]')?.textContent).toBe("You may not approve it: ada already approved entry 9; another operator must");
    expect((second.querySelector('[data-testid="approval-approve"]') as HTMLButtonElement).disabled).toBe(false);
    expect(second.querySelector('[data-testid="approval-not-yours"]')).toBeNull();
    // The a key approves the first call the one who asks may approve, not the first waiting.
    app.viewKeys?.("a");
    await tick();
    expect(q("action-dialog").querySelector("h2")?.textContent).toBe("approve entry 8");
    expect(calls.some(([c]) => c === "approve")).toBe(false);
  });
  it("judges under the name typed in the header, and asks again when it changes", async () => {
    const carol = "carol may not decide on entry 8 under policy refunds (its approvers: dana)";
    const { app, asked, prefs } = setup({
      ...base,
      approvals: () => [{ ...held(8), decision: asked[asked.length - 1] === "carol" ? { approve: carol, reject: carol } : { approve: null, reject: null } }],
    });
    prefs.set("operator", "dana");
    await app.start();
    await app.go("approvals");
    expect(asked[asked.length - 1]).toBe("dana");
    expect((q("approval-approve") as HTMLButtonElement).disabled).toBe(false);
    const typed = q("operator-input") as HTMLInputElement;
    typed.value = " carol ";
    typed.dispatchEvent(new Event("change"));
    await until(() => (q("approval-approve") as HTMLButtonElement | null)?.disabled === true);
    expect(q("approval-not-yours").textContent).toBe(`You may not approve it: ${carol}`);
    expect((q("approval-reject") as HTMLButtonElement).title).toBe(carol);
  });
  it("counts the held calls on the overview, which opens the inbox", async () => {
    const { app } = setup({
      ...base,
      stats: () => ({ ...base.stats(), entries_by_state: [["pending", 2], ["awaiting_approval", 3]] }),
      approvals: () => [held(8)],
    });
    await app.start();
    expect(q("stat-approvals").textContent).toBe("3awaiting approval");
    q("stat-approvals").click();
    await until(() => q("approval-title"));
    expect(app.view).toBe("approvals");
  });
});
