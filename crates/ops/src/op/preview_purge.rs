use crate::{Preview, PurgeTarget};

operation! {
    /// What a purge would remove.
    ///
    /// The entries named (each must exist and not be pending) or every expired entry the
    /// filter matches, and whether any is on a destructive route.
    Op {
        name: preview_purge,
        role: Admin,
        kind: Ledger,
        http: POST "/admin/v1/purge/preview",
        example: r#"{"target": "ids", "ids": [17, 18]}"#,
    }
    fn run(ops, req: PurgeTarget, _) -> Preview {
        ops.preview_purge(&req)
    }
}
