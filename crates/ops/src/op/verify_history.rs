use idemgate_ledger::archive::ArchiveVerifyReport;

use crate::op::common::NoArgs;

operation! {
    /// Verifies the host's own archive (`[retention] archive_dir`) and the live log after it.
    ///
    /// The whole history, naming each missing, altered or reordered segment; `no-archive` when
    /// no archive is configured.
    Op {
        name: verify_history,
        role: Admin,
        kind: Job,
        http: GET "/admin/v1/archive/verify",
        also: [409],
        example: r#"{}"#,
    }
    fn run(ops, _req: NoArgs, cx) -> ArchiveVerifyReport {
        ops.verify_history(cx.progress)
    }
}
