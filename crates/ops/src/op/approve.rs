use idemgate_ledger::Approval;

use crate::approvals::DecideCmd;

operation! {
    /// Approves a call held for approval.
    ///
    /// Logged with the operator and the reason, bound to the request's fingerprint, the
    /// policy's hash and its expiry. The last approval the policy needs (distinct operators;
    /// one OS account is one operator on the CLI and the desktop console) releases the call:
    /// the server forwards it once, and the client's retry gets its result. Refused after
    /// the call's window, twice from one operator, and from an operator the policy does not
    /// name.
    Op {
        name: approve,
        role: Operator,
        kind: Ledger,
        http: POST "/admin/v1/approvals/{entry_id}/approve",
        acts: true,
        example: r#"{"entry_id": 42, "reason": "refund agreed with the customer on the phone"}"#,
    }
    fn run(ops, req: DecideCmd, _) -> Approval {
        ops.decide(&req, true)
    }
}
