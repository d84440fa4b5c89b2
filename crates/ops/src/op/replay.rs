use crate::{ActionCmd, ReplayReport};

operation! {
    /// Sends a stuck, released or failed entry's stored request upstream again.
    ///
    /// Through the data plane built from the route configuration, with the key the first
    /// attempt sent; the outcome is recorded on the entry as the proxy records one. The ledger
    /// refuses an entry in another state; a destructive route needs `confirm_destructive`.
    /// Runs to its recorded end even when its client goes away.
    Op {
        name: replay,
        role: Operator,
        kind: Upstream,
        http: POST "/admin/v1/entries/{entry_id}/replay",
        acts: true,
        example: concat!(
            r#"{"entry_id": 42, "reason": "the upstream was down; it never ran", "#,
            r#""confirm_destructive": false}"#
        ),
    }
    async fn run(ops, engine, req: ActionCmd) -> ReplayReport {
        ops.replay(engine, &req).await
    }
}
