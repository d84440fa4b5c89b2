use idemgate_ledger::archive::ArchiveVerifyReport;

use crate::op::common::{public_key, KeyedPathArg};

operation! {
    /// Verifies an archive (a directory of this host, or `s3://bucket/prefix`) and the live log
    /// after it.
    ///
    /// The whole history, naming each missing, altered or reordered segment; with a public key,
    /// each segment's signed checkpoint too.
    Op {
        name: verify_archive,
        role: Admin,
        kind: Job,
        example: r#"{"path": "/var/lib/idemgate/archive"}"#,
    }
    fn run(ops, req: KeyedPathArg, cx) -> ArchiveVerifyReport {
        let key = public_key(req.public_key.as_deref())?;
        ops.verify_archive(&crate::retention::place("path", &req.path)?, key.as_ref(), cx.progress)
    }
}
