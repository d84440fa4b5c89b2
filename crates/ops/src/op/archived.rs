use idemgate_ledger::archive::SegmentCheck;

use crate::op::common::NoArgs;

operation! {
    /// The segments of the host's own archive (`[retention] archive_dir`), from their manifests
    /// (not verified), each marked recorded or not by this ledger.
    ///
    /// Empty while nothing has been archived; `no-archive` when no archive is configured.
    Op {
        name: archived,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/archive",
        also: [409],
        example: r#"{}"#,
    }
    fn run(ops, _req: NoArgs, _) -> Vec<SegmentCheck> {
        ops.archived()
    }
}
