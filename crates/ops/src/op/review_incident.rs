use idemgate_ledger::Review;

use crate::ReviewCmd;

operation! {
    /// Marks an incident reviewed.
    ///
    /// Logged with the operator and the reason; a later suspect of the same call opens it
    /// again. Refused for an entry that begins no incident.
    Op {
        name: review_incident,
        role: Operator,
        kind: Ledger,
        http: POST "/admin/v1/incidents/{entry_id}/review",
        acts: true,
        example: r#"{"entry_id": 42, "reason": "the customer was refunded the second charge"}"#,
    }
    fn run(ops, req: ReviewCmd, _) -> Review {
        ops.review_incident(&req)
    }
}
