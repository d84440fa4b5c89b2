use idemgate_ledger::export::ExportVerifyReport;

use crate::op::common::PathArg;

operation! {
    /// Verifies an export file of this host against its manifest (`FILE.manifest.json`),
    /// without the ledger.
    Op {
        name: verify_export,
        role: Admin,
        kind: Job,
        example: r#"{"path": "/srv/audit/2027-01.ndjson"}"#,
    }
    fn run(ops, req: PathArg, cx) -> ExportVerifyReport {
        ops.verify_export(std::path::Path::new(&req.path), cx.progress)
    }
}
