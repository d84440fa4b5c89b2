use idemgate_ledger::EntrySummary;

use crate::ResolveCmd;

operation! {
    /// Resolves a stuck entry by hand.
    ///
    /// As `completed` (with the response retries will get, or the upstream's reference to the
    /// effect) or as `released` (a retry runs the call again). Logged with the operator and
    /// the reason.
    Op {
        name: resolve,
        role: Operator,
        kind: Ledger,
        http: POST "/admin/v1/entries/{entry_id}/resolve",
        acts: true,
        // The largest response the ledger keeps, in hex (twice its size), and the rest.
        max_body: 2 * idemgate_ledger::MAX_RESPONSE_BODY + (1 << 20),
        example: concat!(
            r#"{"entry_id": 42, "as": "failed", "reason": "declined by the processor", "#,
            r#""external_ref": "ch_3PzX"}"#
        ),
    }
    fn run(ops, req: ResolveCmd, _) -> EntrySummary {
        ops.resolve(&req)
    }
}
