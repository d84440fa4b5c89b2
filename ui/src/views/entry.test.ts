// The entry view's proof for the auditor: any event of the timeline, proved by the operations
// layer, shown as the tlog-proof file to save and the command that checks it.
import { actions, base, entry, q, setup, until } from "../test-support";

const show = () => ({
  entry: { ...entry(7, { state: "completed", stuck: false }), lease_owner: null, request: null, response: null, last_replay_at: null, completed_at: null, resolved_by: null, resolution_reason: null, external_ref: null, collision_requests: [] },
  timeline: [
    { seq: 41, at: 1_800_000_000_000, kind: "claim", entry_id: 7, route: "charges", scope: "agent-1", key: "key-7", operator: null, reason: null, detail: "{}", payload_digest: null, prev_hash: "a", hash: "b" },
    { seq: 42, at: 1_800_000_001_000, kind: "complete", entry_id: 7, route: "charges", scope: "agent-1", key: "key-7", operator: null, reason: null, detail: "{}", payload_digest: null, prev_hash: "b", hash: "c" },
  ],
  collision_diffs: [],
  actions: actions("resolve", "release", "replay", "reconcile"),
});

const PROOF = "c2sp.org/tlog-proof@v1\nextra e30=\nindex 41\nAAAA\n\nlog.example/idemgate\n100\nROOT=\n\n— log.example/idemgate SIG\n";

describe("entry", () => {
  it("gives the auditor a proof for any event of the timeline", async () => {
    const { app, calls } = setup({ ...base, show, prove: (a) => ({ seq: a.seq, index: 41, size: 100, root: "ROOT=", proof: PROOF }) });
    await app.start();
    await app.go("entry", 7);
    expect(q("proof")).toBeNull();
    q("prove-42").click();
    await until(() => q("proof"));
    expect(calls.filter(([c]) => c === "prove")).toEqual([["prove", { seq: 42 }]]);
    expect(q("proof").textContent).toBe(PROOF);
    expect(q("proof-summary").textContent).toContain("Leaf 41 of the log's tree of 100 events");
    expect(q("proof-summary").textContent).toContain("idemgate verify --proof event-42.tlog-proof --public-key");
  });

  it("says why when the log has no key to sign a proof with", async () => {
    const { app } = setup({ ...base, show, prove: () => { throw { code: "invalid-argument", message: "invalid signing_key_file: a proof carries a checkpoint signed by the log's key" }; } });
    await app.start();
    await app.go("entry", 7);
    q("prove-41").click();
    await until(() => document.body.textContent?.includes("signing_key_file"));
    expect(document.body.textContent).toContain("signing_key_file");
    expect(q("proof")).toBeNull();
  });
});
