use crate::{OpsError, RetentionReport};

operation! {
    /// Applies the configured `[retention]` policy once, as the server does at its interval.
    ///
    /// Purges entries past the policy's age and archives the log's older events, for a ledger
    /// no server runs on. Refused where no policy is configured.
    Op {
        name: run_retention,
        role: Admin,
        kind: Job,
        example: "{}",
    }
    fn run(ops, _req: super::common::NoArgs, cx) -> RetentionReport {
        let policy = ops.retention.as_ref().ok_or_else(|| {
            OpsError::BadConfig("no [retention] policy is configured".into())
        })?;
        ops.retention_run(policy, cx.progress)
    }
}
