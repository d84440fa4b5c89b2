use idemgate_ledger::Approval;

use crate::approvals::DecideCmd;

operation! {
    /// Rejects a call held for approval: it never runs.
    ///
    /// Logged with the operator and the reason; the client's retry is answered
    /// `403 approval-rejected` with the reason. Refused after the call's window.
    Op {
        name: reject,
        role: Operator,
        kind: Ledger,
        http: POST "/admin/v1/approvals/{entry_id}/reject",
        acts: true,
        example: r#"{"entry_id": 42, "reason": "the customer did not ask for this refund"}"#,
    }
    fn run(ops, req: DecideCmd, _) -> Approval {
        ops.decide(&req, false)
    }
}
