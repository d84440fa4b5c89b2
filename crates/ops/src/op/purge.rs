use crate::{PurgeCmd, PurgeReport};

operation! {
    /// Removes entries and their stored requests and responses; their events stay in the log.
    ///
    /// A long job in chunks, each atomic and logged with the operator and the reason: one that
    /// stops (cancelled, or its client went away) leaves what it purged purged, and a second
    /// purge takes the rest.
    Op {
        name: purge,
        role: Admin,
        kind: Job,
        http: POST "/admin/v1/purge",
        acts: true,
        example: concat!(
            r#"{"target": "expired", "filter": {"route": "charges"}, "#,
            r#""reason": "retention: 30 days past expiry"}"#
        ),
    }
    fn run(ops, req: PurgeCmd, cx) -> PurgeReport {
        let r = ops.purge(&req, cx.progress)?;
        if r.cancelled {
            tracing::warn!(
                purged = r.purged.len(),
                "a purge stopped after {} entries: cancelled",
                r.purged.len()
            );
        }
        Ok(r)
    }
}
