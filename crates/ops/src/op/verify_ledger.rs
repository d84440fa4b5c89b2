use idemgate_ledger::VerifyReport;

use crate::op::common::NoArgs;

operation! {
    /// Recomputes the ledger's whole hash chain.
    ///
    /// A long job: the first bad event, if any, and why; it stops (`cancelled`) when cancelled
    /// or when its client goes away.
    Op {
        name: verify_ledger,
        role: Admin,
        kind: Job,
        http: GET "/admin/v1/verify",
        example: r#"{}"#,
    }
    fn run(ops, _req: NoArgs, cx) -> VerifyReport {
        // At debug level: a verify is routine, but a test (or an operator chasing one) can tell
        // a verify under way from one that never ran.
        tracing::debug!("a verify began");
        let r = ops.verify(cx.progress)?;
        stopped(&r);
        Ok(r)
    }
}

/// Says in the log when a chain walk stopped before its end.
pub(super) fn stopped(chain: &VerifyReport) {
    if chain.cancelled {
        tracing::info!(
            events = chain.count,
            "a verify stopped after {} events: cancelled",
            chain.count
        );
    }
}
