use crate::approvals::{ApprovalsRequest, HeldCall};

operation! {
    /// The calls held for approval, newest first: the inbox.
    ///
    /// Each with its request, the policy it matched, who approved it so far, when it expires,
    /// and whether the one who asks may approve or reject it now (`decision`); `open` lists
    /// only those still waiting for a decision.
    Op {
        name: approvals,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/approvals",
        example: r#"{"open": true, "limit": 20}"#,
    }
    fn run(ops, req: ApprovalsRequest, cx) -> Vec<HeldCall> {
        ops.approvals(&req, cx.host.caller)
    }
}
