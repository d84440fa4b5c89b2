use crate::{BulkCmd, BulkReport};

operation! {
    /// Runs a resolve, a replay or a reconcile on many entries, one at a time.
    ///
    /// On every entry its target names when it starts; a long job that stops between two
    /// entries when cancelled (or when its client goes away), each replay or reconcile it
    /// started running to its recorded end. Nothing is done when the command is invalid, or
    /// when an entry is on a destructive route and the command does not confirm it.
    Op {
        name: bulk,
        role: Operator,
        kind: UpstreamJob,
        http: POST "/admin/v1/bulk",
        acts: true,
        example: concat!(
            r#"{"action": "resolve", "target": {"filter": {"stuck": true, "route": "charges"}, "#,
            r#""ids": [41, 42]}, "as": "failed", "reason": "refunded by hand, ticket 1234"}"#
        ),
        reaches_upstream: |cmd| cmd.action.reaches_upstream(),
    }
    fn run(ops, req: BulkCmd, cx) -> BulkReport {
        let r = ops.bulk(&req, cx.host, cx.progress)?;
        if r.cancelled {
            tracing::warn!(
                action = r.action.as_str(),
                "a bulk action stopped after {} of {} entries: cancelled",
                r.attempted,
                r.total
            );
        }
        Ok(r)
    }
}
