use idemgate_ledger::archive::SegmentCheck;

use crate::op::common::PathArg;

operation! {
    /// The archive segments in a directory of this host or in `s3://bucket/prefix`, from their
    /// manifests (not verified), each marked recorded or not by this ledger.
    Op {
        name: archive_segments,
        role: Admin,
        kind: Ledger,
        example: r#"{"path": "/var/lib/idemgate/archive"}"#,
    }
    fn run(ops, req: PathArg, _) -> Vec<SegmentCheck> {
        ops.archive_segments(&crate::retention::place("path", &req.path)?)
    }
}
