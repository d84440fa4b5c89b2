use idemgate_ledger::archive::ArchiveVerifyReport;

use crate::op::common::PathArg;

operation! {
    /// Verifies the archive in a directory of this host and the live log after it.
    ///
    /// The whole history, naming each missing, altered or reordered segment.
    Op {
        name: verify_archive,
        role: Admin,
        kind: Job,
        example: r#"{"path": "/var/lib/idemgate/archive"}"#,
    }
    fn run(ops, req: PathArg, cx) -> ArchiveVerifyReport {
        ops.verify_archive(std::path::Path::new(&req.path), None, cx.progress)
    }
}
