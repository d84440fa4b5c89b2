use idemgate_ledger::EntryDetail;

use crate::approvals::ApprovalsRequest;

operation! {
    /// The calls held for approval, newest first: the inbox.
    ///
    /// Each with its request, the policy it matched, who approved it so far and when it
    /// expires; `open` lists only those still waiting for a decision.
    Op {
        name: approvals,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/approvals",
        example: r#"{"open": true, "limit": 20}"#,
    }
    fn run(ops, req: ApprovalsRequest, _) -> Vec<EntryDetail> {
        ops.approvals(&req)
    }
}
