use crate::op::common::NoArgs;

operation! {
    /// The retention policy's last run, as the log recorded it, and the archive's extent.
    Op {
        name: retention_status,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/retention",
        example: r#"{}"#,
    }
    fn run(ops, _req: NoArgs, _) -> crate::RetentionStatus {
        ops.retention_status()
    }
}
