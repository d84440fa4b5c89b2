use crate::{ActionCmd, ReconcileReport};

operation! {
    /// Asks the upstream whether a stuck entry's effect happened, through its route's probe.
    ///
    /// A 2xx resolves it as completed with the probe's answer, a 404 releases it, anything
    /// else is inconclusive and only noted. Every probe is logged with its decision.
    Op {
        name: reconcile,
        role: Operator,
        kind: Upstream,
        http: POST "/admin/v1/entries/{entry_id}/reconcile",
        acts: true,
        example: r#"{"entry_id": 42, "reason": "the processor says it ran"}"#,
    }
    async fn run(ops, engine, req: ActionCmd) -> ReconcileReport {
        ops.reconcile(engine, &req).await
    }
}
